from torch_npu._import_only import missing

rebuild_npu_tensor = missing("torch_npu.multiprocessing.reductions.rebuild_npu_tensor")
