"""The vLLM patches, one module per patched area; ``engine`` holds the vLLM facts they share."""
