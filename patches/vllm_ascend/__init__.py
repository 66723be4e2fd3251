"""The vllm-ascend patches; ``engine`` holds the vllm-ascend facts they share."""
