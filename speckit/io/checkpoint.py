"""Checkpoint access: config.json and a lazy index over (sharded) safetensors (the streaming
writer is speckit.io.writer).

Headers are parsed here without torch, so inspect/plan stay light; tensors are materialised only
on demand.
"""

from __future__ import annotations

import array
import contextlib
import json
import math
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from speckit.core import hfconfig, jsontext
from speckit.core.dtypes import CODE_TO_TORCH_NAME, torch_to_code
from speckit.core.tensors import (  # the dtype names are re-exported for io's users
    CONFIG_DTYPE,  # noqa: F401
    CONFIG_DTYPE_INV,  # noqa: F401
    DTYPE_BITS,  # noqa: F401
    FLOAT_DTYPES,
    MAX_HEADER_BYTES,  # noqa: F401
    TensorInfo,
    check_header,
    header_length,
)
from speckit.errors import FormatError, UsageError

INDEX_NAME = "model.safetensors.index.json"
# configs and indexes are small; bounds keep a hostile one from eating memory or the stack
MAX_JSON_FILE_BYTES = 64 * 2**20
MAX_JSON_DEPTH = 100
LINK_HINT = ("speckit reads only files inside the checkpoint directory or the Hugging Face "
             "cache's blob store; pass --allow-external-links to follow this link anyway")


def safe_relpath(base: Path, rel: str, *, what: str, allow_external_links: bool = False) -> Path:
    """Resolve ``rel`` inside ``base``; refuse absolute paths and ``..`` escapes, and symlinks
    leaving ``base`` (see check_link) unless ``allow_external_links``."""
    if not rel or os.path.isabs(rel) or rel.startswith(("/", "\\")):
        raise FormatError(
            f"{what} names {rel!r}, which is not a relative file name",
            hint="a checkpoint may only refer to files inside its own directory",
        )
    parts = Path(rel.replace("\\", "/")).parts
    if ".." in parts:
        raise FormatError(
            f"{what} names {rel!r}, which points outside the checkpoint directory",
            hint="refusing path traversal; fix or regenerate the file list",
        )
    full = resolve_link(base / rel, what=what)
    if in_hf_blob_store(full):
        return base / rel  # keep the file's own name (the blob is named by its hash)
    if not full.is_relative_to(resolve_link(base, what=what)) and not allow_external_links:
        raise FormatError(f"{what} names {rel!r}, which resolves outside {base} (to {full})",
                          hint=LINK_HINT)
    return full


def resolve_link(path: Path, *, what: str) -> Path:
    """``path`` with every symlink resolved; a link loop (a file linked to itself included) is a
    FormatError naming it, not a crash."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as e:  # pathlib raises RuntimeError (3.11) or OSError(ELOOP)
        raise FormatError(f"{path}: {what} is a symlink loop (it links back to itself)",
                          hint="replace the link with the real file or directory") from e


def in_hf_blob_store(full: Path) -> bool:
    """huggingface_hub's cache keeps file bodies in models--ORG--NAME/blobs/<etag> and links
    snapshots (and old --local-dir downloads) to them: a link there is a normal download."""
    return full.parent.name == "blobs" and full.parent.parent.name.startswith("models--")


def check_link(root: Path, path: Path, *, what: str, allow_external_links: bool = False) -> None:
    """The one symlink rule for every file of a checkpoint (single file, shard, config, index):
    it must resolve inside ``root`` or the HF blob store, unless ``allow_external_links``."""
    full = resolve_link(path, what=what)
    if allow_external_links or full.is_relative_to(resolve_link(root, what=what)) \
            or in_hf_blob_store(full):
        return
    raise FormatError(f"{path}: {what} is a link to {full}, outside the checkpoint directory",
                      hint=LINK_HINT)


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"))


def _not_regular(path: Path, mode: int, what: str) -> FormatError:
    kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
    return FormatError(f"{path}: {what} is {kind}, not a regular file",
                       hint=f"speckit reads the {what} only from a regular file; replace it "
                       "with the real file")


def open_regular(path: Path, *, what: str = "file") -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file, without ever blocking: stat
    first (a FIFO or device is never opened), then O_NONBLOCK and fstat against a swap."""
    try:
        st = os.stat(path)
    except FileNotFoundError as e:
        raise FormatError(f"{path}: {what} does not exist",
                          hint="the checkpoint is incomplete; re-fetch it") from e
    except OSError as e:
        raise FormatError(f"{path}: cannot read the {what} ({e.strerror})") from e
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise FormatError(f"{path}: cannot read the {what} ({e.strerror})") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode, what)
    return os.fdopen(fd, "rb")


def read_small(path: Path, *, what: str, limit: int = MAX_JSON_FILE_BYTES) -> bytes:
    """The bytes of a small regular file (config, index), refusing one over ``limit``."""
    with open_regular(path, what=what) as f:
        try:
            raw = f.read(limit + 1)
        except OSError as e:
            raise FormatError(f"{path}: cannot read the {what} ({e.strerror})") from e
    if len(raw) > limit:
        raise FormatError(f"{path}: {what} is over {limit} bytes",
                          hint="no real config or index is this large; the file is corrupt")
    return raw


def read_safetensors_header(path: Path, *, file: str | None = None
                            ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Parse and check one safetensors header (core.tensors.check_header: what safetensors
    accepts). Returns (tensors, __metadata__); ``file`` names the tensors' file (default: the
    path's own name)."""
    with open_regular(path, what="safetensors file") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            n = header_length(f.read(8), file_size=size, where=str(path))
            header = f.read(n)
        except OSError as e:
            raise FormatError(f"{path}: cannot read ({e.strerror})") from e
    if len(header) != n:
        raise FormatError(f"{path}: the file shrank while its header was read",
                          hint="another process is writing it; retry when it is done")
    return check_header(header, file_size=size, where=str(path), file=file or path.name)


@dataclass
class Checkpoint:
    """A checkpoint directory: its config and a header-only index of its tensors."""

    path: Path
    config: dict[str, Any]
    tensors: dict[str, TensorInfo]
    files: list[str]
    format: str = "safetensors"  # or "pickle"
    metadata: dict[str, str] = field(default_factory=dict)
    _pickled: dict[str, Any] | None = field(default=None, repr=False)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike, *, allow_pickle: bool = False,
             require_config: bool = True, allow_external_links: bool = False) -> Checkpoint:
        """Read config.json and every safetensors header of the directory ``path``.

        Only regular files are read; a file (or shard) that is a symlink must resolve inside
        the directory or the HF cache's blob store unless ``allow_external_links``."""
        root = Path(path)
        if not root.is_dir():
            raise UsageError(f"{root}: not a directory",
                             hint="pass a checkpoint directory, a registry id or a Hub repo id")
        links = allow_external_links
        config = load_config(root, required=require_config, allow_external_links=links)
        index = root / INDEX_NAME
        if os.path.lexists(index):
            return cls._open_index(root, config, index, allow_external_links=links)
        st_files = sorted(p.name for p in root.glob("*.safetensors"))
        if st_files:
            tensors: dict[str, TensorInfo] = {}
            meta: dict[str, str] = {}
            for fname in st_files:
                check_link(root, root / fname, what="safetensors file", allow_external_links=links)
                found, m = read_safetensors_header(root / fname)
                meta.update(m)
                for name, info in found.items():
                    if name in tensors:
                        raise FormatError(
                            f"{root}: tensor {name!r} appears in both {tensors[name].file} "
                            f"and {fname}",
                            hint="remove the stale shard or add a model.safetensors.index.json",
                        )
                    tensors[name] = info
            return cls(root, config, dict(sorted(tensors.items())), st_files, metadata=meta)
        bins = sorted(p.name for p in root.glob("*.bin") if "optimizer" not in p.name
                      and "training" not in p.name and "scheduler" not in p.name)
        if bins:
            if not allow_pickle:
                raise FormatError(
                    f"{root}: weights are only in pickle files ({', '.join(bins)})",
                    hint="pickles can execute code; pass --allow-pickle to load them with "
                    "torch.load(weights_only=True)",
                )
            return cls._open_pickles(root, config, bins)
        seen = sorted(p.name for p in root.iterdir())
        raise FormatError(
            f"{root}: no weights found (no *.safetensors, {INDEX_NAME} or *.bin); "
            f"files seen: {', '.join(seen) or 'none'}",
            hint="point at the directory that holds config.json and the weight files",
        )

    @classmethod
    def _open_index(cls, root: Path, config: dict, index: Path, *,
                    allow_external_links: bool = False) -> Checkpoint:
        check_link(root, index, what="index", allow_external_links=allow_external_links)
        weight_map = read_index(index)["weight_map"]
        files = sorted(set(weight_map.values()))
        headers: dict[str, dict[str, TensorInfo]] = {}
        meta: dict[str, str] = {}
        for fname in files:
            p = safe_relpath(root, fname, what=f"{index} weight_map",
                             allow_external_links=allow_external_links)
            if not os.path.lexists(p):
                raise FormatError(f"{index}: weight_map names {fname!r}, which does not exist",
                                  hint="the download is incomplete; re-fetch the checkpoint")
            headers[fname], m = read_safetensors_header(p, file=fname)
            meta.update(m)
        tensors: dict[str, TensorInfo] = {}
        for name, fname in weight_map.items():
            if name not in headers[fname]:
                raise FormatError(f"{index}: weight_map puts {name!r} in {fname}, "
                                  f"whose header does not have it",
                                  hint="the index and the shards disagree; re-fetch or rebuild")
            tensors[name] = headers[fname][name]
        for fname, found in headers.items():
            extra = sorted(set(found) - set(weight_map))
            if extra:
                raise FormatError(f"{index}: {fname} holds tensors the index does not list: "
                                  f"{', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}",
                                  hint="the index and the shards disagree; re-fetch or rebuild")
        return cls(root, config, dict(sorted(tensors.items())), files, metadata=meta)

    @classmethod
    def _open_pickles(cls, root: Path, config: dict, bins: list[str]) -> Checkpoint:
        import torch  # heavy; only for the explicit pickle path


        loaded: dict[str, Any] = {}
        tensors: dict[str, TensorInfo] = {}
        for fname in bins:
            try:
                sd = torch.load(root / fname, map_location="cpu", weights_only=True, mmap=True)
            except Exception as e:  # torch raises many types for unpicklable content
                raise FormatError(
                    f"{root / fname}: cannot be loaded with weights_only=True "
                    f"({_pickle_reason(e)})",
                    hint="it holds non-tensor objects; convert it to safetensors in a trusted "
                    "environment first",
                ) from e
            if not isinstance(sd, dict):
                raise FormatError(f"{root / fname}: holds a {type(sd).__name__}, not a state dict")
            for name, t in sd.items():
                if not isinstance(t, torch.Tensor):
                    raise FormatError(f"{root / fname}: entry {name!r} is not a tensor "
                                      f"({type(t).__name__})",
                                      hint="only state dicts of tensors are read; convert it to "
                                      "safetensors in a trusted environment first")
                loaded[name] = t
                tensors[name] = TensorInfo(name, torch_to_code(t.dtype), tuple(t.shape), fname)
        return cls(root, config, dict(sorted(tensors.items())), bins, format="pickle",
                   _pickled=loaded)

    # ---- queries ------------------------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def names(self) -> list[str]:
        return list(self.tensors)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    @property
    def num_params(self) -> int:
        return sum(t.numel for t in self.tensors.values())

    def float_dtype(self) -> str | None:
        """The dtype code holding most float bytes (the checkpoint's working dtype)."""
        by: dict[str, int] = {}
        for t in self.tensors.values():
            if t.dtype in FLOAT_DTYPES:
                by[t.dtype] = by.get(t.dtype, 0) + t.nbytes
        return max(by, key=by.get) if by else None

    def get(self, name: str):
        """Materialise one tensor (torch). Memory-mapped for safetensors."""
        if name not in self.tensors:
            raise FormatError(f"{self.path}: no tensor named {name!r}")
        if self._pickled is not None:
            return self._pickled[name]
        from safetensors import safe_open

        info = self.tensors[name]
        with safe_open(str(self.path / info.file), framework="pt") as f:
            return f.get_tensor(name)

    def iter_tensors(self, names: Iterable[str] | None = None) -> Iterator[tuple[str, Any]]:
        """Yield (name, tensor) one at a time, opening each shard once, in file order."""
        wanted = list(self.tensors) if names is None else list(names)
        if self._pickled is not None:
            for n in wanted:
                yield n, self.get(n)
            return
        from safetensors import safe_open

        by_file: dict[str, list[str]] = {}
        for n in wanted:
            if n not in self.tensors:
                raise FormatError(f"{self.path}: no tensor named {n!r}")
            by_file.setdefault(self.tensors[n].file, []).append(n)
        for fname, ns in by_file.items():
            with safe_open(str(self.path / fname), framework="pt") as f:
                for n in ns:
                    yield n, f.get_tensor(n)


def _pickle_reason(e: BaseException) -> str:
    """The informative line of torch's weights_only refusal (it names the offending global)."""

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    for line in text.splitlines():
        if "Unsupported global" in line or "WeightsUnpickler error" in line:
            return line.strip().split(" was not an allowed global")[0]
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{e.__class__.__name__}: {first}"


def load_config(root: Path, *, required: bool = True,
                allow_external_links: bool = False) -> dict[str, Any]:
    """config.json of ``root``, read as a regular file and checked field by field
    (core.hfconfig: every field speckit uses has its type, sign and range)."""
    cfg = Path(root) / "config.json"
    if not os.path.lexists(cfg):
        if required:
            raise FormatError(f"{root}: no config.json",
                              hint="a checkpoint directory needs its config.json beside the "
                                   "weights")
        return {}
    check_link(Path(root), cfg, what="config.json", allow_external_links=allow_external_links)
    return read_config_file(cfg)


def read_config_file(path: Path) -> dict[str, Any]:
    """A config.json file read as load_config reads one (a regular file of bounded size, checked
    field by field, no NaN), its symlinks left to the caller."""
    config = hfconfig.parse(read_small(Path(path), what="config.json"), where=str(path))
    _refuse_non_finite(config, str(path), "")
    return config


def _refuse_non_finite(value: Any, where: str, field: str) -> None:
    """NaN and Infinity are not JSON: a config holding one (in any field, known or not) would be
    copied into an output that json parsers other than Python's refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        raise FormatError(f"{where}: field {field or '(top level)'!r} is {value}, which is not a "
                          "JSON number", hint=f"write a finite number for {field} (or remove the "
                          "field); NaN and Infinity are not valid JSON")
    if isinstance(value, dict):
        for k, v in value.items():
            _refuse_non_finite(v, where, f"{field}.{k}" if field else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _refuse_non_finite(v, where, f"{field}[{i}]")


def read_index(index: Path) -> dict[str, Any]:
    """A model.safetensors.index.json: a JSON object whose weight_map maps names to files."""
    data = jsontext.loads(read_small(index, what="index"), where=str(index),
                          max_depth=MAX_JSON_DEPTH, what="index")
    # checked explicitly (not with assert, which python -O strips): a non-string file name
    # would otherwise crash the path-traversal guard with a TypeError
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise FormatError(f"{index}: not a valid safetensors index (needs a 'weight_map' "
                          "object mapping tensor names to file names)",
                          hint="the index is corrupt; re-fetch or rebuild it")
    return data


def tensor_names(path: Path) -> list[str] | None:
    """The tensor names of the safetensors checkpoint at ``path`` (headers only), or None when it
    is not one speckit reads without --allow-pickle: evidence for layout detection, never
    required."""
    try:
        return list(Checkpoint.open(path).tensors)
    except FormatError:
        return None


def code_to_torch(code: str):
    """The torch dtype of a safetensors dtype code (torch imported here, when asked)."""
    import torch

    try:
        return getattr(torch, CODE_TO_TORCH_NAME[code])
    except (KeyError, AttributeError) as e:
        raise ValueError(f"dtype {code!r} has no torch equivalent here") from e


def read_bytes(ck: Checkpoint, name: str) -> bytes:
    """All bytes of one (small) tensor, without torch for safetensors inputs."""
    info = ck.tensors[name]
    if ck.format == "pickle":
        import torch

        t = ck.get(name).detach().contiguous().reshape(-1)
        return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
    with open(ck.path / info.file, "rb") as f:
        f.seek(info.offsets[0])
        data = f.read(info.nbytes)
    if len(data) != info.nbytes:
        raise FormatError(f"{ck.path / info.file}: tensor {name!r} is truncated")
    return data


def read_ints(ck: Checkpoint, name: str) -> list[int]:
    """An integer or bool tensor as a flat Python list (d2t, t2d, token_ordering ...)."""
    info = ck.tensors[name]
    codes = {"I64": "q", "I32": "i", "I16": "h", "I8": "b", "U8": "B", "BOOL": "B", "U16": "H",
             "U32": "I", "U64": "Q"}
    if info.dtype not in codes:
        raise FormatError(f"{ck.path}: tensor {name!r} is {info.dtype}, expected an integer or "
                          f"bool tensor")
    arr = array.array(codes[info.dtype])
    arr.frombytes(read_bytes(ck, name))
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tolist()


def advise_sequential(fd: int) -> None:
    """Tell the kernel a file is read front to back (what cp does): a larger readahead window
    when its bytes are not in the page cache yet. Advice only: failures are ignored."""
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)



def write_json(path: Path, data: Any) -> None:
    """Write JSON through a temp file in the same directory, then rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=False)
            f.write("\n")
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a config must read like any file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def normal_modes(root: Path) -> None:
    """Give a finished output directory the modes a user's own files get (mkdtemp/mkstemp make
    0700/0600, which a serving process running as another user could not read)."""
    mask = _umask()
    os.chmod(root, 0o777 & ~mask)
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            os.chmod(os.path.join(dirpath, d), 0o777 & ~mask)
        for f in filenames:
            p = os.path.join(dirpath, f)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)
