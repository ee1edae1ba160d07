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
    opts = ValidateOptions(target=str(target), method="ngram", k=2, num_prompts=2, force=force)
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
    assert any("--force: started anyway" in w for w in warnings)
