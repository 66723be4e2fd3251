"""SGLang's patch modules, in install order; every other module here is a helper (``patches/engines.py``)."""

PATCH_MODULES = ('server_args', 'scheduler', 'http', 'tokenizer', 'engine')
