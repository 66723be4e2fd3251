"""Import-only stand-in for CANN's ``acl`` Python module (vllm-ascend imports
``acl.rt.memcpy`` at module level); calling anything raises ImportError."""
