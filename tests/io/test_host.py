"""speckit.io.host: the GPUs torch lists (CUDA or ROCm) and validate's memory gate built on them.

AMD is the first platform speckit serves, so the ROCm path is tested here with a torch-shaped fake
whose build is a HIP one (torch.version.hip set), as on an MI300X machine.
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

from speckit.errors import PlanError
from speckit.io import host
from speckit.validate import ValidateOptions
from tests.support import factories

GiB = 1 << 30

gates = importlib.import_module("speckit.validate.gates")
inputs = importlib.import_module("speckit.validate.inputs")


class _FakeCuda:
    """torch.cuda as a ROCm build answers it: AMD devices behind the CUDA API."""

    def __init__(self, props: list[SimpleNamespace]):
        self.props = props

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self.props)

    def get_device_properties(self, i: int) -> SimpleNamespace:
        return self.props[i]

    def mem_get_info(self, i: int) -> tuple[int, int]:
        total = self.props[i].total_memory
        return total - 3 * GiB, total


def _mi300x_torch(n: int = 2) -> SimpleNamespace:
    props = [SimpleNamespace(name="AMD Instinct MI300X", total_memory=192 * GiB,
                             gcnArchName="gfx942:sramecc+:xnack-", major=9, minor=4)
             for _ in range(n)]
    return SimpleNamespace(version=SimpleNamespace(hip="6.3.42131-fa1d09cbd", cuda=None),
                           cuda=_FakeCuda(props))


def test_rocm_devices_are_read_through_torch_cuda():
    found = host.devices(_mi300x_torch(), [])
    assert [d.kind for d in found] == ["rocm", "rocm"]
    assert found[0].name == "AMD Instinct MI300X" and found[0].memory_bytes == 192 * GiB
    assert found[0].capability.startswith("gfx942") and found[1].index == 1
    gpu, plat = host.local_gpu(False, found=found)
    assert plat == "rocm" and gpu.vendor == "amd" and gpu.memory_bytes == 192 * GiB


def test_no_gpu_listed_gives_no_device():
    gpu, _ = host.local_gpu(False, found=[])
    assert gpu is None
    cpu_gpu, plat = host.local_gpu(True)
    assert plat == "cpu" and cpu_gpu.vendor == "cpu" and cpu_gpu.memory_bytes > 0


@pytest.fixture
def on_mi300x(monkeypatch):
    """This process sees a ROCm vLLM and two MI300X (no GPU tool or device is touched)."""
    monkeypatch.setattr(host, "engine_on_cpu", lambda: False)
    monkeypatch.setattr(host, "gpu_devices", lambda **kw: host.devices(_mi300x_torch(), []))


def _gate(target, *, eargs, force=False):
    warnings: list[str] = []
    opts = ValidateOptions(target=str(target), method="ngram", k=2, num_prompts=2,
                           force_start=force)
    inp = inputs.gather_inputs(opts, warnings)
    assert inp.cpu is False
    info = gates.check_gates(inp, opts, eargs=eargs, concurrency=1, warnings=warnings)
    return info, warnings


def test_validate_memory_gate_runs_on_rocm(on_mi300x, tmp_path):
    """The bug this guards: on ROCm the GPU's memory was never read, so validate skipped the
    memory check silently. The gate now sizes the run for the MI300X torch lists, and refuses a
    KV cache that cannot fit in its 192 GiB before any engine starts."""
    target = factories.make_target(tmp_path / "target", with_tokenizer=True)
    info, warnings = _gate(target, eargs={})
    assert info is not None and info["verdict"], warnings
    assert not any("memory check was skipped" in w for w in warnings)
    with pytest.raises(PlanError, match="will not start"):
        _gate(target, eargs={"kv_cache_memory_bytes": 400 * GiB})
    info, warnings = _gate(target, eargs={"kv_cache_memory_bytes": 400 * GiB}, force=True)
    assert any("--force-start: started anyway" in w for w in warnings)


# ---- the kernel verdict: vLLM's CPU backend by its code, a GPU timed with a margin ------------

def test_cpu_backend_is_decided_by_its_code_not_timed():
    plain = {k.format: k for k in host.cpu_kernels({"avx512f", "amx_bf16", "amx_tile"})}
    # MXFP4 and NVFP4: every scheme of the format is refused by vLLM's CPU backend (the scheme
    # table's cpu_refusal), so doctor's kernel list says refused, as its scheme list does
    assert {f: k.status for f, k in plain.items()} == {"mxfp4": "refused", "fp8": "emulated",
                                                       "nvfp4": "refused"}
    assert all(k.seconds is None and k.basis == "vLLM's CPU backend" for k in plain.values())
    assert "ChannelWiseTorchFP8ScaledMMLinearKernel" in plain["fp8"].detail
    # AMX-FP8 (vLLM's CPUFP8W8A8ScaledMMLinearKernel) is the one native CPU path
    amx = {k.format: k.status for k in host.cpu_kernels({"amx_tile", "amx_fp8"})}
    assert amx == {"mxfp4": "refused", "fp8": "native", "nvfp4": "refused"}


@pytest.mark.parametrize(("ratio", "cap", "want"), [
    (0.55, "9.0", ("native", "timed")),  # H100 FP8: well under the bf16 time
    (7.5, "9.0", ("emulated", "timed")),  # an upcast: far over it, whatever the device says
    (1.8, "9.0", ("native", "timed, inside the margin: compute capability")),
    (1.8, "8.0", ("emulated", "timed, inside the margin: compute capability")),  # A100: no FP8
])
def test_timed_probe_has_a_margin_decided_by_capability(ratio, cap, want):
    dev = host.Device("cuda", "gpu", 80 * GiB, capability=cap)
    assert host.timed_status(ratio, "fp8", dev) == want


def test_capability_rule_is_vllms():
    cuda = lambda cap: host.Device("cuda", "g", GiB, capability=cap)  # noqa: E731
    rocm = lambda arch: host.Device("rocm", "g", GiB, capability=arch)  # noqa: E731
    assert host.capability_native("fp8", cuda("8.9")) and not host.capability_native("fp8",
                                                                                     cuda("8.6"))
    assert host.capability_native("mxfp4", cuda("10.0"))
    assert not host.capability_native("mxfp4", cuda("9.0"))
    assert host.capability_native("fp8", rocm("gfx942:sramecc+:xnack-"))
    assert host.capability_native("mxfp4", rocm("gfx950"))
    assert not host.capability_native("mxfp4", rocm("gfx942"))


def test_a_kernel_probe_child_that_dies_says_why(monkeypatch):
    """A GPU probe whose child exits without an answer reports its status and last stderr line
    (the torch or driver error), not an IndexError."""
    import subprocess

    def dead_child(*a, **kw):
        return subprocess.CompletedProcess(a, 1, stdout="",
                                           stderr="Traceback ...\nRuntimeError: CUDA driver\x1b[2J")

    monkeypatch.setattr(host, "engine_on_cpu", lambda: False)
    monkeypatch.setattr(host.subprocess, "run", dead_child)
    host.kernel_probes.cache_clear()
    try:
        got = host.kernel_probes()
    finally:
        host.kernel_probes.cache_clear()
    assert got and all(k.status == "unavailable" for k in got)
    assert "status 1: RuntimeError: CUDA driver\\x1b[2J" in got[0].detail
