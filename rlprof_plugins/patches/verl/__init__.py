"""verl's patch modules, in install order; every other module here is a helper (``patches/engines.py``).

May import: the floors below it that ``patches/__init__`` states (patch modules: helpers, facts,
``base``, what every engine's patches share; helpers: the same less patch modules), and the core.
"""

PATCH_MODULES = ('servers',)
