"""vLLM's patch modules, in install order; every other module here is a helper (``patches/engines.py``)."""

PATCH_MODULES = ('profiler_config', 'worker', 'cuda_profiler', 'engine_core', 'engine_profile', 'async_llm', 'api_router')
