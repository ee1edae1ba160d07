"""Where vLLM has a native kernel for each GPU format key of the scheme table (QuantScheme.
capability): its platform rules, read from vLLM's code, as data. speckit.io.host applies them to
the machine it runs on (a timed probe inside its margin, and vLLM's CPU backend, fall back to
these rules)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelRule:
    """One format key's native-kernel rule per vLLM platform."""

    cuda_min: tuple[int, int]  # lowest CUDA compute capability with the native kernel
    rocm_prefixes: tuple[str, ...]  # gfx architecture name prefixes with the native kernel
    source: str  # where in vLLM the rule is read
    cpu_native_flag: str | None  # a /proc/cpuinfo flag that gives vLLM's CPU backend a kernel
    cpu_native: str  # what vLLM's CPU backend runs with that flag ("" when there is none)
    cpu_emulated: str  # what vLLM's CPU backend runs without it

    def native_on_cuda(self, capability: str) -> bool:
        try:
            major, minor = (int(x) for x in capability.split(".")[:2])
        except ValueError:
            return False
        return (major, minor) >= self.cuda_min

    def native_on_rocm(self, arch: str) -> bool:
        return arch.startswith(self.rocm_prefixes)

    def native_on_cpu(self, flags: set[str]) -> bool:
        return self.cpu_native_flag is not None and self.cpu_native_flag in flags


KERNEL_RULES: dict[str, KernelRule] = {
    "fp8": KernelRule(
        cuda_min=(8, 9), rocm_prefixes=("gfx9", "gfx1250", "gfx1200", "gfx1201"),
        source="vllm/platforms/cuda.py and rocm.py supports_fp8: CUDA from compute capability "
        "8.9, ROCm on CDNA (gfx9, gfx1250) and RDNA4 (gfx1200/1201)",
        cpu_native_flag="amx_fp8",
        cpu_native="AMX-FP8 present: vLLM runs CPUFP8W8A8ScaledMMLinearKernel (scaled_mm/cpu.py)",
        cpu_emulated="no AMX-FP8 on this CPU: vLLM falls back to ChannelWiseTorchFP8ScaledMM"
        "LinearKernel, torch._scaled_mm without FP8 arithmetic (vllm/model_executor/kernels/"
        "linear/scaled_mm/cpu.py, pytorch.py)"),
    "mxfp4": KernelRule(
        cuda_min=(10, 0), rocm_prefixes=("gfx95", "gfx1250"),
        source="vllm/platforms/rocm.py supports_mx (gfx95x, gfx1250); CUDA FP4 from 10.0 "
        "(Blackwell)",
        cpu_native_flag=None, cpu_native="",
        cpu_emulated="vLLM's CpuPlatform.supports_mx() is False: weights dequantized, matmuls "
        "in bf16 (vllm/platforms/interface.py, quark/schemes/quark_ocp_mx.py)"),
    "nvfp4": KernelRule(
        cuda_min=(10, 0), rocm_prefixes=("gfx95", "gfx1250"),
        source="CUDA FP4 from compute capability 10.0 (Blackwell); ROCm as MX FP4 (rocm.py "
        "supports_mx)",
        cpu_native_flag=None, cpu_native="",
        cpu_emulated="no FP4 kernel on vLLM's CPU backend: its W4A16 path forces the CUDA-only "
        "MarlinNvFp4LinearKernel, else EmulationNvFp4LinearKernel dequantizes"),
}
