from torch_npu._import_only import missing

memcpy = missing("acl.rt.memcpy")
