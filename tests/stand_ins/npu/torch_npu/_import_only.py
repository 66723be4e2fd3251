"""Names vllm-ascend imports or annotates with at module level, but rlprof's
tests never use: each is a type whose use (calling it, instantiating it)
raises ImportError naming it, and whose attributes are such types too.

They only let vllm-ascend's real modules import, so its real ``NPUWorker``
class can be patched and driven on a CPU machine.
"""


class _MissingMeta(type):
    def __getattr__(cls, item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return missing(f"{cls.__qualname__}.{item}")


def missing(qualname: str) -> type:
    def refuse(*args, **kwargs):
        raise ImportError(f"{qualname} is not available: this is rlprof's test stand-in for torch_npu/CANN")

    return _MissingMeta(qualname.rsplit(".", 1)[-1], (), {"__new__": refuse, "__qualname__": qualname})


def module_getattr(module_name: str):
    """A module ``__getattr__`` that answers every unknown name with ``missing``."""

    def __getattr__(item: str):
        if item.startswith("__"):
            raise AttributeError(item)
        return missing(f"{module_name}.{item}")

    return __getattr__
