"""The GPU catalog `speckit plan` sizes deployments against: memory, low-precision formats, vendor.

Built-in entries cover the AMD Instinct and NVIDIA data-centre parts our users run; a TOML file
(``$SPECKIT_GPUS`` or ``~/.config/speckit/gpus.toml``, or ``--gpu-file``; read by
speckit.io.datafiles) adds or overrides entries.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from speckit.errors import FormatError, UsageError

GiB = 1024**3
MiB = 1024**2


@dataclass(frozen=True)
class GPU:
    """One accelerator model as vLLM sees it."""

    name: str
    vendor: str  # "nvidia" | "amd" | other
    memory_bytes: int  # total device memory as the driver reports it (vLLM's budget base)
    memory_source: str  # where memory_bytes comes from, so the number can be audited
    # format key (a QuantScheme's `capability`: fp8, mxfp4, nvfp4) -> "native" (a low-precision
    # kernel) | "emulated" (stored low, computed in 16 bits: vLLM's weight-only / emulation
    # kernels) | "no" (vLLM refuses it); a key not listed is "no"
    formats: Mapping[str, str]
    aliases: tuple[str, ...] = field(default=())
    # datasheet rates the step-cost model (speckit.core.plan.steps) scales; 0 = unknown
    hbm_bytes_per_s: float = 0.0  # HBM bandwidth
    bf16_flops: float = 0.0  # dense BF16 matrix peak
    fp8_flops: float = 0.0  # dense FP8 matrix peak (0 without native FP8)
    link_bytes_per_s: float = 0.0  # GPU-to-GPU bandwidth per direction (NVLink / Infinity Fabric)
    perf_source: str = ""

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB

    @property
    def platform(self) -> str:
        """The vLLM platform that serves on it: "rocm" (AMD), "cpu", else "cuda"."""
        return {"amd": "rocm", "cpu": "cpu"}.get(self.vendor, "cuda")

    def format_status(self, capability: str) -> str:
        """"native" | "emulated" | "no" for one format key."""
        return self.formats.get(capability, "no")

    def native(self, capability: str) -> bool:
        return self.format_status(capability) == "native"


FORMAT_STATES = ("native", "emulated", "no")


def formats(**kw: str) -> Mapping[str, str]:
    """A read-only formats mapping (frozen GPUs stay hashable by identity of their fields)."""
    return MappingProxyType(dict(kw))


# Hopper / MI300 run FP8 natively; FP4 formats there go through vLLM's weight-only (Marlin) or
# emulation kernels. Blackwell (B200) has FP4 tensor cores for both MX and NV block scales;
# MI355X has MXFP4 ones, and NVFP4 only through vLLM's emulation. A100 has no FP8 W8A8 (vLLM's
# Quark FP8 refuses capability < 8.9); FP4 there is Marlin weight-only.
_HOPPER = formats(fp8="native", mxfp4="emulated", nvfp4="emulated")
_MI300 = formats(fp8="native", mxfp4="emulated", nvfp4="emulated")


# Memory: the total cudaMemGetInfo reports, which is vLLM's budget base. H200 was measured with
# torch.cuda.mem_get_info on the device machine (bench/results/plan_h200.txt); the other NVIDIA
# parts are nvidia-smi totals; AMD parts are the HBM capacity of the spec sheet (binary GB).
_T = 1e12
# Rates: vendor datasheets, dense (no sparsity). NVIDIA: H100/H200 SXM 989 TFLOP/s BF16 and 1979
# FP8, 900 GB/s NVLink (450 per direction); B200 2.25/4.5 PFLOP/s, 1.8 TB/s NVLink. AMD:
# MI300X/MI325X 1307/2615 TFLOP/s, Infinity Fabric 896 GB/s aggregate; MI355X 2.5/5.0 PFLOP/s.
_BUILTIN: tuple[GPU, ...] = (
    GPU("MI300X", "amd", 192 * GiB, "vendor spec: 192 GB HBM3", formats=_MI300,
        aliases=("mi300", "instinct-mi300x"), hbm_bytes_per_s=5.3 * _T,
        bf16_flops=1307.4 * _T, fp8_flops=2614.9 * _T, link_bytes_per_s=448e9,
        perf_source="AMD Instinct MI300X datasheet"),
    GPU("MI325X", "amd", 256 * GiB, "vendor spec: 256 GB HBM3E", formats=_MI300,
        aliases=("mi325", "instinct-mi325x"), hbm_bytes_per_s=6.0 * _T,
        bf16_flops=1307.4 * _T, fp8_flops=2614.9 * _T, link_bytes_per_s=448e9,
        perf_source="AMD Instinct MI325X datasheet"),
    GPU("MI355X", "amd", 288 * GiB, "vendor spec: 288 GB HBM3E", formats=formats(
        fp8="native", mxfp4="native", nvfp4="emulated"),
        aliases=("mi355", "mi350x", "instinct-mi355x"), hbm_bytes_per_s=8.0 * _T,
        bf16_flops=2516.6 * _T, fp8_flops=5033.2 * _T, link_bytes_per_s=538e9,
        perf_source="AMD Instinct MI355X datasheet"),
    GPU("A100-80GB", "nvidia", 81920 * MiB, "nvidia-smi: 81920 MiB", formats=formats(
        fp8="no", mxfp4="emulated", nvfp4="emulated"),
        aliases=("a100", "a100-80g", "a100-sxm4-80gb"), hbm_bytes_per_s=2.039 * _T,
        bf16_flops=312 * _T, link_bytes_per_s=300e9,
        perf_source="NVIDIA A100 datasheet (SXM4 80GB)"),
    GPU("H100", "nvidia", 81559 * MiB, "nvidia-smi: 81559 MiB (H100 SXM 80GB)",
        formats=_HOPPER, aliases=("h100-80gb", "h100-sxm", "h100-sxm5-80gb"),
        hbm_bytes_per_s=3.35 * _T, bf16_flops=989.4 * _T, fp8_flops=1978.9 * _T,
        link_bytes_per_s=450e9, perf_source="NVIDIA H100 datasheet (SXM)"),
    GPU("H200", "nvidia", 150_109_880_320, "measured: torch.cuda.mem_get_info total on an H200 "
        "SXM 141GB", formats=_HOPPER, aliases=("h200-141gb", "h200-sxm"),
        hbm_bytes_per_s=4.8 * _T, bf16_flops=989.4 * _T, fp8_flops=1978.9 * _T,
        link_bytes_per_s=450e9, perf_source="NVIDIA H200 datasheet (SXM)"),
    GPU("B200", "nvidia", 183359 * MiB, "nvidia-smi: 183359 MiB (B200 180GB)",
        formats=formats(fp8="native", mxfp4="native", nvfp4="native"), aliases=("b200-180gb",),
        hbm_bytes_per_s=8.0 * _T,
        bf16_flops=2250 * _T, fp8_flops=4500 * _T, link_bytes_per_s=900e9,
        perf_source="NVIDIA HGX B200 datasheet"),
)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def parse_user_gpus(text: str, *, origin: str) -> list[GPU]:
    """The ``[[gpu]]`` tables of a gpus.toml's text: name, vendor, memory_gib (or memory_bytes),
    formats, aliases, and the optional rates hbm_tb_s, bf16_tflops, fp8_tflops, link_gb_s."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise FormatError(f"{origin}: not valid TOML ({e})") from e
    out = []
    for i, row in enumerate(data.get("gpu", [])):
        where = f"{origin}: [[gpu]] #{i + 1}"
        if not isinstance(row, dict) or "name" not in row:
            raise FormatError(f"{where} has no 'name'",
                              hint='each entry needs name = "...", vendor and memory_gib')
        if "memory_bytes" in row:
            mem = int(row["memory_bytes"])
        elif "memory_gib" in row:
            mem = int(float(row["memory_gib"]) * GiB)
        else:
            raise FormatError(f"{where} ({row['name']}) has neither memory_gib nor memory_bytes")
        out.append(GPU(str(row["name"]), str(row.get("vendor", "unknown")).lower(), mem,
                       f"user file {origin}", formats=_user_formats(row, where),
                       aliases=tuple(str(a) for a in row.get("aliases", ())),
                       **_user_rates(row, where), perf_source=f"user file {origin}"))
    return out


def _user_formats(row: dict, where: str) -> Mapping[str, str]:
    """``formats = {fp8 = "native", nvfp4 = "emulated"}``; the older keys ``fp8 = true`` and
    ``mxfp4 = "native"`` still read (a key in both places must agree)."""
    table = row.get("formats", {})
    if not isinstance(table, dict):
        raise FormatError(f"{where}: formats must be a table (formats = {{fp8 = \"native\"}})")
    out = {str(k): v for k, v in table.items()}
    legacy = {}
    if "fp8" in row:
        if not isinstance(row["fp8"], bool):
            raise FormatError(f"{where}: fp8 must be true or false (got {row['fp8']!r})")
        legacy["fp8"] = "native" if row["fp8"] else "no"
    if "mxfp4" in row:
        legacy["mxfp4"] = row["mxfp4"]
    for k, v in legacy.items():
        if k in out and out[k] != v:
            raise FormatError(f"{where}: {k} = {row[k]!r} disagrees with formats.{k} = {out[k]!r}")
        out[k] = v
    for k, v in out.items():
        if v not in FORMAT_STATES:
            raise FormatError(f"{where}: {k} must be native, emulated or no (got {v!r})")
    return formats(**out)


_RATE_KEYS = {"hbm_tb_s": ("hbm_bytes_per_s", 1e12), "bf16_tflops": ("bf16_flops", 1e12),
              "fp8_tflops": ("fp8_flops", 1e12), "link_gb_s": ("link_bytes_per_s", 1e9)}


def _user_rates(row: dict, where: str) -> dict[str, float]:
    """Optional datasheet rates of a user entry (hbm_tb_s, bf16_tflops, fp8_tflops, link_gb_s)."""
    out = {}
    for key, (field_name, unit) in _RATE_KEYS.items():
        if key in row:
            try:
                v = float(row[key])
            except (TypeError, ValueError):
                v = -1.0
            if v < 0:
                raise FormatError(f"{where}: {key} must be a non-negative number "
                                  f"(got {row[key]!r})")
            out[field_name] = v * unit
    return out


def catalog(*, extra: Sequence[GPU] = ()) -> list[GPU]:
    """Built-in GPUs plus ``extra`` (a user entry with a known name replaces the built-in);
    speckit.io.datafiles.catalog adds the user's gpus.toml."""
    gpus = {_norm(g.name): g for g in _BUILTIN}
    for g in extra:
        gpus[_norm(g.name)] = g
    return list(gpus.values())


def find_gpu(name: str, gpus: Sequence[GPU]) -> GPU:
    """Look a GPU up in ``gpus`` by name or alias (case-insensitive); unknown names list them."""
    key = _norm(name)
    for g in gpus:
        if key == _norm(g.name) or key in (_norm(a) for a in g.aliases):
            return g
    listing = ", ".join(f"{g.name} ({g.memory_gib:.0f} GiB)" for g in gpus)
    raise UsageError(
        f"unknown GPU {name!r}; the catalog has: {listing}",
        hint="pass --gpu-mem-gib X for any other device, or add it to a gpus.toml "
        "([[gpu]] name, vendor, memory_gib, formats) via --gpu-file or $SPECKIT_GPUS",
    )


DEFAULT_GPU = "H200"  # what plan and registry resolve size for when --gpu is not given


def builtin_gpu(name: str, *, extra: Sequence[GPU] = ()) -> GPU:
    """A built-in GPU (or one of ``extra``) by name or alias. Commands look GPUs up with
    speckit.io.datafiles.get_gpu, which adds the user's gpus.toml."""
    return find_gpu(name, catalog(extra=extra))


def custom_gpu(memory_gib: float, *, vendor: str = "unknown",
               formats_: Mapping[str, str] | None = None) -> GPU:
    """A device known only by its memory (``--gpu-mem-gib``)."""
    if memory_gib <= 0:
        raise UsageError(f"--gpu-mem-gib must be positive (got {memory_gib})")
    return GPU(f"{memory_gib:g} GiB device", vendor, int(memory_gib * GiB),
               "--gpu-mem-gib", formats=_HOPPER if formats_ is None else formats(**formats_))
