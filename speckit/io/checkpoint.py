"""Checkpoint access: config.json plus a lazy index over (sharded) safetensors, and a streaming writer.

Headers are parsed here without torch, so inspect/plan stay light; tensors are materialised only on demand.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import struct
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.errors import FormatError, UsageError

# bits per element for every dtype code the safetensors format defines
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}
FLOAT_DTYPES = {"F16", "BF16", "F32", "F64"}
# names used in config.json ("torch_dtype"/"dtype") for the float codes
CONFIG_DTYPE = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}
CONFIG_DTYPE_INV = {v: k for k, v in CONFIG_DTYPE.items()}

INDEX_NAME = "model.safetensors.index.json"
MAX_HEADER_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives and what it is, as the file header says."""

    name: str
    dtype: str  # safetensors code, e.g. "BF16"
    shape: tuple[int, ...]
    file: str  # file name relative to the checkpoint directory
    offsets: tuple[int, int] = (0, 0)  # absolute byte range inside ``file``

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.numel * DTYPE_BITS[self.dtype] + 7) // 8


def safe_relpath(base: Path, rel: str, *, what: str) -> Path:
    """Resolve ``rel`` inside ``base``; refuse absolute paths and ``..`` escapes."""
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
    full = (base / rel).resolve()
    if _in_hf_blob_store(base, full):
        return base / rel  # keep the file's own name (the blob is named by its hash)
    if not full.is_relative_to(base.resolve()):
        raise FormatError(
            f"{what} names {rel!r}, which resolves outside {base}",
            hint="refusing path traversal (symlink or '..'); fix the file list",
        )
    return full


def _in_hf_blob_store(base: Path, full: Path) -> bool:
    """huggingface_hub's cache links snapshots/<commit>/<file> to ../../blobs/<etag>: allowed."""
    root = base.resolve()
    return root.parent.name == "snapshots" and full.parent == root.parent.parent / "blobs"


def read_safetensors_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Parse and check one safetensors header. Returns (tensors, __metadata__)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise FormatError(
                    f"{path}: file is {size} bytes, too short to be safetensors",
                    hint="the download is truncated; re-fetch it (speckit fetch --verify)",
                )
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise FormatError(
                    f"{path}: header length {n} exceeds the file size {size}",
                    hint="the file is truncated or not safetensors; re-fetch it",
                )
            header_bytes = f.read(n)
    except OSError as e:
        raise FormatError(f"{path}: cannot read ({e.strerror})") from e
    try:
        header = json.loads(header_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: header is not valid JSON ({e})",
                          hint="the file is corrupt; re-fetch it") from e
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    data_start = 8 + n
    data_len = size - data_start
    tensors: dict[str, TensorInfo] = {}
    spans = []
    for name, entry in header.items():
        try:
            dtype = entry["dtype"]
            shape = tuple(int(s) for s in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise FormatError(f"{path}: tensor {name!r} has a malformed header entry ({e})") from e
        if dtype not in DTYPE_BITS:
            raise FormatError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        info = TensorInfo(name, dtype, shape, path.name, (data_start + begin, data_start + end))
        if begin < 0 or end < begin or end - begin != info.nbytes:
            raise FormatError(
                f"{path}: tensor {name!r} header claims bytes [{begin}, {end}) but "
                f"{dtype}{list(shape)} needs {info.nbytes}",
                hint="the header lies about its offsets; the file is corrupt, re-fetch or rebuild it",
            )
        if end > data_len:
            raise FormatError(
                f"{path}: tensor {name!r} ends at byte {end} but the data section has {data_len}",
                hint="the file is truncated; re-fetch it (speckit fetch --verify)",
            )
        spans.append((begin, end, name))
        tensors[name] = info
    spans.sort()
    for (b0, e0, n0), (b1, _e1, n1) in itertools.pairwise(spans):
        if b1 < e0:
            raise FormatError(f"{path}: tensors {n0!r} and {n1!r} overlap in the data section",
                              hint="the header lies about its offsets; the file is corrupt")
    return tensors, meta


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
             require_config: bool = True) -> Checkpoint:
        root = Path(path)
        if not root.is_dir():
            raise UsageError(f"{root}: not a directory",
                             hint="pass a checkpoint directory, a registry id or a Hub repo id")
        config = load_config(root, required=require_config)
        index = root / INDEX_NAME
        if index.exists():
            return cls._open_index(root, config, index)
        st_files = sorted(p.name for p in root.glob("*.safetensors"))
        if st_files:
            tensors: dict[str, TensorInfo] = {}
            meta: dict[str, str] = {}
            for fname in st_files:
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
    def _open_index(cls, root: Path, config: dict, index: Path) -> Checkpoint:
        try:
            data = json.loads(index.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise FormatError(f"{index}: not a valid safetensors index (needs a 'weight_map' "
                              f"object): {e}") from e
        # checked explicitly (not with assert, which python -O strips): a non-string file name
        # would otherwise crash the path-traversal guard with a TypeError
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
            raise FormatError(f"{index}: not a valid safetensors index (needs a 'weight_map' "
                              "object mapping tensor names to file names)",
                              hint="the index is corrupt; re-fetch or rebuild it")
        files = sorted(set(weight_map.values()))
        headers: dict[str, dict[str, TensorInfo]] = {}
        meta: dict[str, str] = {}
        for fname in files:
            p = safe_relpath(root, fname, what=f"{index.name} weight_map")
            if not p.exists():
                raise FormatError(f"{index}: weight_map names {fname!r}, which does not exist",
                                  hint="the download is incomplete; re-fetch the checkpoint")
            headers[fname], m = read_safetensors_header(p)
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

        from speckit.core.dtypes import torch_to_code

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
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    for line in text.splitlines():
        if "Unsupported global" in line or "WeightsUnpickler error" in line:
            return line.strip().split(" was not an allowed global")[0]
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"{e.__class__.__name__}: {first}"


def load_config(root: Path, *, required: bool = True) -> dict[str, Any]:
    cfg = root / "config.json"
    if not cfg.exists():
        if required:
            raise FormatError(f"{root}: no config.json",
                              hint="a checkpoint directory needs its config.json beside the weights")
        return {}
    try:
        data = json.loads(cfg.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{cfg}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise FormatError(f"{cfg}: top level must be a JSON object")
    return data


# ---- writing ----------------------------------------------------------------------------------

@dataclass
class _Slot:
    file: str
    begin: int  # offset inside the data section
    info: TensorInfo


class CheckpointWriter:
    """Write tensors into sharded safetensors one at a time, never holding a shard in memory.

    The full list of (name, dtype, shape) is declared first, so every header can be written up
    front; each tensor is then written straight to its offset.
    """

    def __init__(self, out_dir: Path, specs: list[tuple[str, str, tuple[int, ...]]], *,
                 max_shard_bytes: int = 5 * 10**9, metadata: dict[str, str] | None = None,
                 copied_from: dict[str, tuple[str, int]] | None = None):
        """``copied_from``: for tensors that will be copied whole from another file, that file
        and the byte offset they start at there. Each header is then padded (with spaces, as
        safetensors allows) so that most copied bytes keep their offset within a 4 KiB page,
        and a new shard starts where the source file changes once the current shard holds
        ALIGNED_SHARD_MIN bytes (a sharded source keeps its boundaries, within the size limit):
        the kernel copies page-aligned ranges ~10-15% faster."""
        copied_from = copied_from or {}
        self.out_dir = Path(out_dir)
        self.metadata = {"format": "pt", **(metadata or {})}
        names = [s[0] for s in specs]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise FormatError(f"output would hold duplicate tensor names: {', '.join(dup)}")
        groups: list[list[TensorInfo]] = [[]]
        size = 0
        last_file = None
        for name, dtype, shape in specs:
            info = TensorInfo(name, dtype, tuple(shape), "")
            src_file = copied_from[name][0] if name in copied_from else last_file
            if groups[-1] and (size + info.nbytes > max_shard_bytes or (
                    src_file != last_file and size >= ALIGNED_SHARD_MIN)):
                groups.append([])
                size = 0
            groups[-1].append(info)
            size += info.nbytes
            last_file = src_file
        n = len(groups)
        self.files = (["model.safetensors"] if n == 1 else
                      [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)])
        self.slots: dict[str, _Slot] = {}
        self._written: set[str] = set()
        self._handles = {}
        for fname, group in zip(self.files, groups):
            header: dict[str, Any] = {"__metadata__": self.metadata}
            off = 0
            for info in group:
                header[info.name] = {"dtype": info.dtype, "shape": list(info.shape),
                                     "data_offsets": [off, off + info.nbytes]}
                self.slots[info.name] = _Slot(fname, off, info)
                off += info.nbytes
            hb = json.dumps(header, separators=(",", ":")).encode()
            hb += b" " * ((8 - len(hb) % 8) % 8)  # keep the data section 8-byte aligned
            start = _page_phase(group, self.slots, copied_from)
            if start is not None:
                hb += b" " * ((start - 8 - len(hb)) % PAGE)
            fh = open(self.out_dir / fname, "wb")  # noqa: SIM115 (closed in close())
            fh.write(struct.pack("<Q", len(hb)))
            fh.write(hb)
            fh.truncate(8 + len(hb) + off)
            self._handles[fname] = (fh, 8 + len(hb))

    def write(self, name: str, tensor) -> None:
        from speckit.core.dtypes import torch_to_code

        slot = self.slots.get(name)
        if slot is None:
            raise FormatError(f"writer: tensor {name!r} was not declared")
        if name in self._written:
            raise FormatError(f"writer: tensor {name!r} written twice")
        code = torch_to_code(tensor.dtype)
        if code != slot.info.dtype or tuple(tensor.shape) != slot.info.shape:
            raise FormatError(
                f"writer: tensor {name!r} is {code}{list(tensor.shape)}, declared as "
                f"{slot.info.dtype}{list(slot.info.shape)}")
        fh, data_start = self._handles[slot.file]
        fh.seek(data_start + slot.begin)
        if tensor.numel():
            raw = tensor.detach().contiguous().reshape(-1).view(_byte_dtype()).numpy()
            fh.write(memoryview(raw))
        self._written.add(name)

    def write_bytes(self, name: str, parts) -> None:
        """Write a declared tensor from raw parts, in order: bytes-like buffers, or
        ``(fd, offset, length)`` ranges of an open file copied in the kernel (os.copy_file_range),
        so a tensor larger than RAM streams without being materialised. No dtype conversion."""
        slot = self.slots.get(name)
        if slot is None:
            raise FormatError(f"writer: tensor {name!r} was not declared")
        if name in self._written:
            raise FormatError(f"writer: tensor {name!r} written twice")
        fh, data_start = self._handles[slot.file]
        fh.flush()  # buffered writes from write() must land before fd-level writes
        out_fd = fh.fileno()
        pos = data_start + slot.begin
        end = pos + slot.info.nbytes
        for part in parts:
            if isinstance(part, tuple):
                src_fd, off, length = part
                if pos + length > end:
                    raise FormatError(f"writer: tensor {name!r} given more than "
                                      f"{slot.info.nbytes} bytes")
                _copy_range(src_fd, off, out_fd, pos, length)
                pos += length
            else:
                view = memoryview(part).cast("B")
                if pos + len(view) > end:
                    raise FormatError(f"writer: tensor {name!r} given more than "
                                      f"{slot.info.nbytes} bytes")
                done = 0
                while done < len(view):
                    done += os.pwrite(out_fd, view[done:], pos + done)
                pos += len(view)
        if pos != end:
            raise FormatError(f"writer: tensor {name!r} got {pos - data_start - slot.begin} bytes, "
                              f"declared {slot.info.nbytes}")
        self._written.add(name)

    def close(self) -> list[str]:
        missing = sorted(set(self.slots) - self._written)
        for fh, _ in self._handles.values():
            fh.close()
        if missing:
            raise FormatError(f"writer: declared tensors never written: {', '.join(missing[:8])}")
        if len(self.files) > 1:
            total = sum(s.info.nbytes for s in self.slots.values())
            index = {"metadata": {"total_size": total},
                     "weight_map": {n: s.file for n, s in sorted(self.slots.items())}}
            (self.out_dir / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
            return [*self.files, INDEX_NAME]
        return list(self.files)


def advise_sequential(fd: int) -> None:
    """Tell the kernel a file is read front to back (what cp does): a larger readahead window
    when its bytes are not in the page cache yet. Advice only: failures are ignored."""
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)


PAGE = 4096
ALIGNED_SHARD_MIN = 512 * 2**20


def _page_phase(group: list[TensorInfo], slots: dict[str, _Slot],
                copied_from: dict[str, tuple[str, int]]) -> int | None:
    """The data-section start (mod PAGE, 8-byte aligned) that page-aligns the most copied bytes
    with their source, or None when nothing is copied whole."""
    weight: dict[int, int] = {}
    for info in group:
        if info.name not in copied_from:
            continue
        phase = (copied_from[info.name][1] - slots[info.name].begin) % PAGE
        if phase % 8 == 0:
            weight[phase] = weight.get(phase, 0) + info.nbytes
    if not weight:
        return None
    return max(weight, key=lambda ph: (weight[ph], -ph))


def _copy_range(src_fd: int, src_off: int, dst_fd: int, dst_off: int, length: int) -> None:
    """Copy bytes between two files at explicit offsets; in-kernel when the OS allows it."""
    use_cfr = hasattr(os, "copy_file_range")
    while length > 0:
        if use_cfr:
            try:
                n = os.copy_file_range(src_fd, dst_fd, length, src_off, dst_off)
            except OSError:  # EXDEV/ENOSYS/EINVAL on some filesystems: plain reads and writes
                use_cfr = False
                continue
            if n == 0:
                raise FormatError(f"unexpected end of input file at byte {src_off}",
                                  hint="the source file is truncated; re-fetch it")
        else:
            buf = os.pread(src_fd, min(length, 16 * 1024 * 1024), src_off)
            if not buf:
                raise FormatError(f"unexpected end of input file at byte {src_off}",
                                  hint="the source file is truncated; re-fetch it")
            n = 0
            while n < len(buf):
                n += os.pwrite(dst_fd, memoryview(buf)[n:], dst_off + n)
        src_off += n
        dst_off += n
        length -= n


def _byte_dtype():
    import torch

    return torch.uint8


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
