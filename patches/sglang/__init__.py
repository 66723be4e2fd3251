"""The SGLang patches, one module per patched area; ``engine`` holds the SGLang facts they share."""
