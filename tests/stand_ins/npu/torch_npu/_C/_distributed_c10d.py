from torch_npu._import_only import missing

ProcessGroupHCCL = missing("torch_npu._C._distributed_c10d.ProcessGroupHCCL")
