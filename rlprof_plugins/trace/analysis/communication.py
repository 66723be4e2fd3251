"""Which device kernels and host operators are communication: one table, by the libraries that launch them.

A rank's exposed communication is what tensor- and expert-parallel users tune, so a collective
counted as compute hides exactly the number they came for. Inference engines rarely run NCCL for
their hottest collectives: vLLM's and SGLang's custom all-reduce, torch's symmetric memory,
FlashInfer's fused all-reduce and DeepEP's dispatch and combine each launch kernels of their own
names. Each family below names its library and the source file its kernel names come from, so a
name a new release adds is checked against the one place it must be added.

A name is communication when a family's pattern matches it. Computation kernels that merely hold such
a word stay computation (``COMPUTE_LOOKALIKES``, each tested): attention kernels that *reduce* partial
results (``paged_attention_ll4mi_reduce_kernel``), torch's ``reduce_kernel`` and ``reduce_segments``,
elementwise broadcasts. A bare "broadcast" is therefore no pattern: NCCL's broadcast is NCCL's name.
HolisticTraceAnalysis counts only names holding ``nccl`` as communication (its
``get_kernel_type``); docs/report.md says where the two differ and why this table is right.

The CPU side's names (``c10d::allreduce_``, ``gloo:all_reduce``, vLLM's ``_C::shm_allreduce``)
match the same table: the host collectives the clock alignment pairs across ranks are these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Family:
    """A library's communication kernels: the pattern over their names, where the names come from, and
    examples copied from that source (the tests classify every example)."""

    library: str
    source: str  # repository and file the names come from
    pattern: str  # a regular expression over the kernel's (demangled) name, case-insensitive
    examples: tuple[str, ...]


FAMILIES: tuple[Family, ...] = (
    Family("NCCL and RCCL", "NVIDIA/nccl src/device/generate.py (ncclDevKernel_ and the collective, operation, "
           "type, algorithm, protocol); ROCm/rccl src/device/common.h",
           r"nccl|rccl",
           ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
            "void ncclKernel_ReduceScatter_RING_LL128_Sum_float(ncclDevComm*, unsigned long, ncclWork*)")),
    Family("HCCL (Ascend)", "torch_npu's profiler: HCCL operators (hcom_<coll>_) and their device tasks",
           r"hccl|\bhcom_",
           ("hcom_allReduce__184_0_1", "hcom_allGather__513_1_1", "HcclAllReduce", "hcom_reduceScatter__977_2_1")),
    Family("torch symmetric memory", "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu",
           r"multimem_(all_reduce|one_shot|all_gather|reduce_scatter)|one_shot_all_reduce|two_shot_all_reduce|"
           r"symm_mem::|reduce_scatter_kernel|all_gather_kernel",
           ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, "
            "unsigned int**, unsigned long, unsigned long)",
            "void (anonymous namespace)::one_shot_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16**, unsigned long, "
            "c10::BFloat16*, c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)",
            "void (anonymous namespace)::two_shot_all_reduce_kernel_inplace<float, 16, 8>(float**, unsigned long, "
            "unsigned int**, unsigned long)",
            "void (anonymous namespace)::multimem_one_shot_all_reduce_kernel<float, 16>(float*, float*, unsigned long, "
            "unsigned int**, unsigned long, unsigned long)")),
    Family("vLLM and SGLang custom all-reduce", "vllm-project/vllm csrc/custom_all_reduce.cuh; "
           "sgl-project/sglang sgl-kernel/csrc/allreduce/custom_all_reduce.cuh",
           r"cross_device_reduce",
           ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
            "vllm::Signal*, __nv_bfloat16*, int, int)",
            "void vllm::cross_device_reduce_2stage<__half, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
            "__half*, int, int)",
            "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 2>(sglang::RankData*, sglang::RankSignals, "
            "sglang::Signal*, __nv_bfloat16*, int, int)")),
    Family("aiter (ROCm)", "ROCm/aiter csrc/include/custom_all_reduce.cuh",
           r"aiter::.*(cross_device_reduce|allreduce|all_gather|reduce_scatter)",
           ("void aiter::cross_device_reduce_1stage_naive<__hip_bfloat16, 8>(aiter::RankData*, aiter::RankSignals, "
            "aiter::Signal*, __hip_bfloat16*, int, int)",
            "void aiter::cross_device_reduce_2stage_naive<__half, 8>(aiter::RankData*, aiter::RankSignals, "
            "aiter::Signal*, __half*, int, int)")),
    Family("quick all-reduce (ROCm)", "vllm-project/vllm csrc/quickreduce/quick_reduce_impl.cuh",
           r"quickreduce::",
           ("void quickreduce::allreduce_prototype_twoshot<quickreduce::AllReduceTwoshot<__half, "
            "quickreduce::CodecQ4<__half>, false>, 8>(__half const*, __half*, unsigned int, int, int, unsigned char**, "
            "unsigned int, unsigned int)",)),
    Family("FlashInfer and TensorRT-LLM all-reduce and fusion",
           "flashinfer-ai/flashinfer include/flashinfer/comm/trtllm_allreduce_fusion.cuh; "
           "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu",
           r"allreduce_fusion|trtllm_allreduce|customallreduce|oneshotallreduce|twoshotallreduce|lamport",
           ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8, "
            "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionPattern)1, true>(flashinfer::trtllm_allreduce_"
            "fusion::AllReduceFusionParams<__nv_bfloat16>)",
            "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, false>(tensorrt_llm::kernels::"
            "AllReduceParams)",
            "void tensorrt_llm::kernels::twoShotAllReduceKernel<half, 4, false>(tensorrt_llm::kernels::"
            "AllReduceParams)")),
    Family("DeepEP, pplx-kernels and NVSHMEM all-to-all",
           "deepseek-ai/DeepEP csrc/kernels/intranode.cu, internode.cu, internode_ll.cu; "
           "perplexityai/pplx-kernels csrc/all_to_all/intranode_dispatch.cu, internode_combine.cu; "
           "NVIDIA nvshmem device API",
           r"deep_ep::|\bpplx::|nvshmem|all_to_all|alltoall",
           ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, "
            "int4 const*, float const*, long const*, float const*, bool const*, int const*, int, int, int, int, "
            "int, int, int, int, void**, int, int, int)",
            "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, "
            "__nv_bfloat16 const*, float const*, int const*, int const*, int const*, int const*, int, int, int, "
            "int, void**, int, int, int)",
            "void deep_ep::internode_ll::dispatch<true, 7168>(void*, float*, int*, long*, int*, void*, long*, "
            "void*, int*, void*, long*, int*, void const*, long const*, int*, int*, int, int, int, int, int, int, "
            "int, int)",
            "void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, "
            "bool const*, int*, int*, int, int, int, int, int, void**, int**, int)",
            "void pplx::dispatchKernel<true, true>(int, unsigned long, unsigned long, unsigned long, unsigned long)",
            "void pplx::combineKernel<__nv_bfloat16, __nv_bfloat16>(unsigned long, unsigned long)",
            "nvshmemi_barrier_all_kernel()")),
    Family("MSCCL++", "microsoft/mscclpp apps/nccl/src/allreduce.hpp; sgl-project/sglang "
           "sgl-kernel/csrc/allreduce/mscclpp_allreduce.cuh",
           r"mscclpp|msccl",
           ("void allreduce7<__nv_bfloat16>(mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, __nv_bfloat16*)",
            "void sglang::mscclpp::allreduce_LL_1node<__nv_bfloat16>(...)", "mscclKernel_Sum_float_Simple_false")),
    Family("any collective by its name (host operators too)", "pytorch/pytorch torch/csrc/distributed/c10d "
           "(c10d:: operators, gloo:, record_param_comms); vllm csrc/cpu/shm.cpp and sglang "
           "sgl-kernel/csrc/cpu/shm.cpp (shm_allreduce); the engines' own all_reduce operators",
           r"c10d::|\bgloo:|all_?reduce|all_?gather|reduce_scatter|record_param_comms",
           ("c10d::allreduce_", "gloo:all_reduce", "_C::shm_allreduce", "sgl_kernel::shm_allgather",
            "c10d::_allgather_base_", "c10d::broadcast_", "record_param_comms", "vllm::all_reduce")),
)

# Computation kernels whose names hold a communication word ("reduce", "broadcast", "combine"): copied from their
# sources, each must stay computation (no family's pattern may grow to catch them; the tests hold every one)
COMPUTE_LOOKALIKES: tuple[tuple[str, str], ...] = (
    ("void paged_attention_ll4mi_reduce_kernel<__hip_bfloat16, 128, 128, 256, 512, 8>(__hip_bfloat16*, float const*, "
     "float const*, __hip_bfloat16 const*, int const*, int const*, int, float const*)",
     "vllm-project/vllm csrc/rocm/attention.cu: the attention's partitions reduced"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
     "float>, unsigned int, float, 4, 4>)", "pytorch/pytorch aten/src/ATen/native/cuda/Reduce.cuh"),
    ("void at::native::(anonymous namespace)::reduce_segments<float>(float const*, float*, long, long, long, long)",
     "pytorch/pytorch aten/src/ATen/native/cuda/SegmentReduce.cu"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, "
     "float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::"
     "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::"
     "{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<...>)", "ATen's broadcasting elementwise kernel"),
    ("triton_poi_fused_add_broadcast_in_dim_mul_0", "an Inductor kernel over a broadcast operand"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, "
     "cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::bfloat16_t> >, 4, 1, true>(flash::Flash_fwd_"
     "params)", "Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h: split-KV results combined"),
    ("void vllm::merge_attn_states_kernel<__nv_bfloat16, 128>(__nv_bfloat16*, float*, __nv_bfloat16 const*, "
     "float const*, __nv_bfloat16 const*, float const*, unsigned int, unsigned int, unsigned int)",
     "vllm-project/vllm csrc/attention/merge_attn_states.cu"),
    ("void vllm::moe::moe_sum_kernel<__nv_bfloat16, 2>(__nv_bfloat16*, __nv_bfloat16 const*, int)",
     "vllm-project/vllm csrc/moe/moe_align_sum_kernels.cu: the experts' outputs summed on one GPU"),
)

_COMMUNICATION = re.compile("|".join(f"(?:{f.pattern})" for f in FAMILIES), re.IGNORECASE)


@lru_cache(maxsize=65536)
def is_communication(name: str) -> bool:
    """A communication kernel or host collective by its name (see ``FAMILIES``); kernel names repeat, so the
    answer is cached per name."""
    return _COMMUNICATION.search(name) is not None


def family_of(name: str) -> Family | None:
    """The first family whose pattern matches a communication name (the docs' and tests' question)."""
    if not is_communication(name):
        return None
    return next(f for f in FAMILIES if re.search(f.pattern, name, re.IGNORECASE))


def family_table() -> str:
    """docs/report.md's table of the families (written by ``make patch-table``; a test holds the two equal)."""
    import textwrap

    rows = []
    for f in FAMILIES:
        rows += textwrap.wrap(f"- **{f.library}**: names matching `{f.pattern.replace('|', ' or ')}` "
                              f"(case-insensitive); from {f.source}", width=104, subsequent_indent="  ",
                              break_long_words=False, break_on_hyphens=False)
    return "\n".join(rows) + "\n"
