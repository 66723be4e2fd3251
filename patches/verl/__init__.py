"""verl's patch modules, in install order; every other module here is a helper (``patches/engines.py``)."""

PATCH_MODULES = ('servers',)
