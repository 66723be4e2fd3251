from torch_npu._import_only import missing

_register_atb_extensions = missing("torch_npu.op_plugin.atb._atb_ops._register_atb_extensions")
