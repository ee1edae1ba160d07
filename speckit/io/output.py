"""Output safety for every writing command: checks against all inputs, atomic no-clobber publish.

Also the one provenance writer and the one remote-code stripper, so no output ever carries code.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit import __version__
from speckit.core import PACKAGE_DIR
from speckit.errors import FormatError, OutputError, SpeckitError, UsageError
from speckit.io.checkpoint import normal_modes, safe_relpath, write_json

PROVENANCE = "speckit-provenance.json"
# config keys that only mean something with trust_remote_code (they name code to import)
REMOTE_CODE_KEYS = ("auto_map", "custom_pipelines", "trust_remote_code")
# file suffixes that are code (or compiled code) and never belong in an output
CODE_SUFFIXES = frozenset({
    ".py", ".pyc", ".pyo", ".pyd", ".pyx", ".pxd", ".pyi", ".so", ".dylib", ".dll", ".exe",
    ".sh", ".bash", ".bat", ".cmd", ".ps1", ".ipynb", ".whl", ".egg", ".jar", ".js",
})
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so every cleanup path that handles SIGINT handles it too."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM in a long run, with what it left on disk said truthfully: ``hint``
    says what was kept and how to go on (the CLI prints it; exit 130)."""

    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.message, self.hint = message, hint


# ---- checks --------------------------------------------------------------------------------------

def check_output(out: str | os.PathLike, inputs: Mapping[str, str | os.PathLike | None], *,
                 force: bool, flag: str = "-o", reuse: bool = False) -> Path:
    """Refuse an output that is, contains or sits inside any input (symlinks resolved).

    ``inputs`` maps the flag (or argument name) of each input to its local path; None and paths
    that do not exist are skipped. ``reuse``: the output is a directory written into (report
    dirs), not replaced, so an existing one is fine. Returns the absolute output path.
    """
    given = Path(out).expanduser()
    path = Path(os.path.abspath(given))
    if not path.name:
        raise UsageError(f"{flag} {out}: not a directory speckit can write",
                         hint=f"name a new directory, e.g. {flag} ./out")
    check_not_in_package(path, flag)
    seen = {Path(os.path.realpath(path)), Path(os.path.realpath(path.parent)) / path.name}
    for name, ref in inputs.items():
        if ref is None:
            continue
        for protected in _protected_paths(Path(ref).expanduser()):
            for o in seen:
                relation = _relation(o, protected)
                if relation:
                    raise UsageError(
                        f"{flag} {out} {relation} the {name} input ({protected})",
                        hint="write the output to a new directory outside every input "
                        "(--force never replaces an input)")
    if not reuse:
        cwd = Path.cwd().resolve()
        if any(cwd == o or cwd.is_relative_to(o) for o in seen):
            raise UsageError(f"{flag} {out} is the current directory or holds it",
                             hint=f"name a new directory, e.g. {flag} ./out")
    _check_parent(path, flag)
    if os.path.lexists(path):
        if not path.is_dir():
            raise UsageError(f"{flag} {out} exists and is not a directory",
                             hint="remove it or choose another output directory")
        if not force and not reuse:
            raise UsageError(f"{out} already exists",
                             hint="pass --force to replace it, or choose -o")
        if force and not reuse:
            check_replaceable(path, flag)
    return path


def check_not_in_package(path: str | os.PathLike, flag: str = "-o") -> None:
    """Refuse to write inside the installed speckit package (its drafts and data are read-only
    inputs, and an upgrade would delete the output)."""
    real = Path(os.path.realpath(os.path.abspath(path)))
    pkg = Path(os.path.realpath(PACKAGE_DIR))
    if real == pkg or real.is_relative_to(pkg):
        raise UsageError(f"{flag} {path} is inside the installed speckit package ({pkg})",
                         hint=f"write it under your working directory, e.g. {flag} "
                         f"./{real.name}")


# every speckit output carries one of these at its top level (provenance, training record,
# converted target): --force replaces only a directory holding one, or an empty one
RUN_STATE = "speckit-run.json"  # a run directory's marker (speckit.io.rundir)
SPECKIT_MARKERS = (PROVENANCE, "speckit-train.json", "speckit-target.json", RUN_STATE)


def is_speckit_output(path: Path) -> bool:
    """True for a directory speckit wrote (a marker file at its top) or an empty one."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    if not entries:
        return True
    return any(e.name in SPECKIT_MARKERS and e.is_file(follow_symlinks=False) for e in entries)


def check_replaceable(path: Path, flag: str = "-o") -> None:
    """--force replaces only what speckit wrote: refuse any other directory (a home folder, a
    project) before anything is deleted. A symlink is fine: only the link is replaced."""
    if os.path.lexists(path) and not path.is_symlink() and path.is_dir() \
            and not is_speckit_output(path):
        raise UsageError(f"{flag} {path} exists and speckit did not write it (no "
                         f"{' / '.join(SPECKIT_MARKERS)} at its top), so --force will not "
                         "replace it", hint="choose a new directory, or remove this one yourself "
                         "if it really is disposable")


def _protected_paths(ref: Path) -> Iterator[Path]:
    """An input's real path, and the real paths its symlinked entries point to (a directory of
    links into another tree must protect that tree too)."""
    if not os.path.lexists(ref):
        return
    yield Path(os.path.realpath(ref))
    if ref.is_dir():
        with contextlib.suppress(OSError):
            for entry in os.scandir(ref):
                if entry.is_symlink():
                    yield Path(os.path.realpath(entry.path))


def _relation(out: Path, inp: Path) -> str | None:
    if out == inp:
        return "is"
    if out.is_relative_to(inp):
        return "sits inside"
    if inp.is_relative_to(out):
        return "contains"
    return None


def _check_parent(path: Path, flag: str) -> None:
    """The nearest existing ancestor must be a directory (`-o some/file/out` is refused)."""
    for parent in path.parents:
        if os.path.lexists(parent):
            if not parent.is_dir():
                raise UsageError(f"{flag} {path}: {parent} is a file, not a directory",
                                 hint="choose an output under an existing directory")
            return


# ---- OS errors -----------------------------------------------------------------------------------

_ALWAYS_OUTPUT = {
    errno.ENOSPC: ("no space left on the device", "free space there, or choose -o elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free space there, or choose -o elsewhere"),
    errno.EROFS: ("the filesystem is read-only", "choose -o on a writable filesystem"),
    errno.EFBIG: ("a file is too large for the filesystem", "choose -o on another filesystem"),
}
_PATH_OUTPUT = {
    errno.EACCES: ("permission denied", "choose -o in a directory you can write"),
    errno.EPERM: ("operation not permitted", "choose -o in a directory you can write"),
    errno.ENOTDIR: ("a parent is not a directory", "choose -o under an existing directory"),
    errno.EISDIR: ("a directory is in the way", "choose another output directory"),
    errno.ENAMETOOLONG: ("the name is too long", "choose a shorter output path"),
}


@contextlib.contextmanager
def output_errors(out: str | os.PathLike, *, scope: str | os.PathLike | None = None
                  ) -> Iterator[None]:
    """Turn an OS error of writing ``out`` into an OutputError naming the path, with a hint.

    Disk full / quota / read-only are always the output's; permission and not-a-directory errors
    only when they name ``scope`` (default: the output's parent directory), a path under it or
    one of its parents (``mkdir -p`` failing higher up).
    """
    out = Path(out)
    root = Path(os.path.abspath(scope if scope is not None else out.parent))
    try:
        yield
    except SpeckitError:
        raise
    except OSError as e:
        what = _ALWAYS_OUTPUT.get(e.errno)
        if what is None and e.errno in _PATH_OUTPUT and e.filename is not None:
            hit = Path(os.path.abspath(os.fsdecode(e.filename)))
            if hit.is_relative_to(root) or root.is_relative_to(hit):  # under it, or a parent
                what = _PATH_OUTPUT[e.errno]
        if what is None:
            raise
        where = os.fsdecode(e.filename) if e.filename else str(out)
        raise OutputError(f"cannot write {out}: {what[0]} ({where})",
                          hint=f"{what[1]}; nothing was left half-written") from e


# ---- atomic publish ------------------------------------------------------------------------------

@contextlib.contextmanager
def atomic_output_dir(out: str | os.PathLike, *, force: bool = False) -> Iterator[Path]:
    """Yield a temp dir beside ``out``; on success it becomes ``out``, on any failure it vanishes.

    The final rename never clobbers: an ``out`` that appeared meanwhile is an error unless
    ``force``, which replaces it (a symlinked one too) leaving nothing behind. SIGTERM cleans up
    like Ctrl-C. Temp dirs of dead runs beside ``out`` are removed first.
    """
    check_not_in_package(out)
    out = Path(os.path.abspath(Path(out).expanduser()))
    if os.path.lexists(out) and not force:
        raise UsageError(f"{out} already exists", hint="pass --force to replace it, or choose -o")
    if os.path.lexists(out) and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory",
                         hint="remove it or choose another output directory")
    check_replaceable(out)
    with output_errors(out), sigterm_as_interrupt():
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temp_dirs(out)
        tmp = out.parent / f".{out.name}.tmp-{_run_token()}"
        tmp.mkdir(mode=0o700)
        try:
            yield tmp
            strip_remote_code(tmp)  # the guard: whatever a writer put there, no code leaves
            normal_modes(tmp)
            with _deferred_sigterm():
                _publish(tmp, out, force=force)
        except BaseException:
            with _deferred_sigterm(deliver=False):  # already failing: finish the cleanup
                _remove(tmp)
            raise


def _publish(tmp: Path, out: Path, *, force: bool) -> None:
    if not os.path.lexists(out):
        try:
            _rename_noreplace(tmp, out)
            return
        except FileExistsError:
            if not force:
                raise OutputError(f"{out} appeared while this run was writing it",
                                  hint="another run wrote it meanwhile; pass --force to replace "
                                  "it, or choose another -o") from None
    elif not force:  # existed at the start only with --force; this is a race
        raise OutputError(f"{out} appeared while this run was writing it",
                          hint="pass --force to replace it, or choose another -o")
    check_replaceable(out)  # what appeared meanwhile is held to the same rule
    _replace(tmp, out)


def _replace(tmp: Path, out: Path) -> None:
    """Swap the new dir in for the old (atomically where the kernel can), then delete the old."""
    if _renameat2(tmp, out, _RENAME_EXCHANGE):
        _remove(tmp)  # tmp's name now holds the previous output (or the old symlink)
        return
    old = out.parent / f".{out.name}.old-{_run_token()}"  # named like a temp: stale-cleanable
    os.rename(out, old)
    os.rename(tmp, out)
    _remove(old)


def _remove(path: Path) -> None:
    """Delete a file, a symlink (never what it points to) or a directory tree."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_symlink() or not path.is_dir():
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)


_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_NO_RENAMEAT2 = (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EPERM)


def _libc_renameat2():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_renameat2_fn = _libc_renameat2() if os.name == "posix" else None


def _renameat2(src: Path, dst: Path, flags: int) -> bool:
    """renameat2(2) with ``flags``; False where the kernel, libc or filesystem lacks it."""
    if _renameat2_fn is None:
        return False
    if _renameat2_fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in _NO_RENAMEAT2:
        return False
    raise OSError(err, os.strerror(err), str(dst))


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Rename that raises FileExistsError instead of replacing ``dst``."""
    try:
        if _renameat2(src, dst, _RENAME_NOREPLACE):
            return
    except OSError as e:
        if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
            raise FileExistsError(e.errno, e.strerror, str(dst)) from None
        raise
    with _publish_lock(dst):  # no renameat2: an O_EXCL lock file makes check+rename one step
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, "exists", str(dst))
        try:
            os.rename(src, dst)
        except OSError as e:  # a run that does not take the lock got there first
            if e.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise FileExistsError(e.errno, e.strerror, str(dst)) from None
            raise


@contextlib.contextmanager
def _publish_lock(out: Path, *, wait_s: float = 30.0) -> Iterator[None]:
    lock = out.parent / f".{out.name}.lock"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            with contextlib.suppress(OSError, ValueError):
                owner = _parse_token(lock.read_text().strip())
                if owner is not None and not _alive(owner):
                    lock.unlink()  # its run died holding it
                    continue
            if time.monotonic() > deadline:
                raise OutputError(f"{lock} is held by another run",
                                  hint="wait for it to finish, or remove the lock file if no "
                                  "speckit run is writing there") from None
            time.sleep(0.05)
    try:
        os.write(fd, _run_token().encode())
        os.close(fd)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()


# ---- who made a temp dir, and is it still running ------------------------------------------------

@dataclass(frozen=True)
class _Owner:
    host: str
    boot: str
    pid: int
    start: str


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:
        return "0"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TOKEN_RE = re.compile(r"([0-9a-f]{8})-([0-9a-f]{1,8})-(\d+)-(\d+)-[0-9a-f]+")


def _run_token() -> str:
    """host-boot-pid-start-random: enough to tell later whether this run is still alive, even
    after the pid is reused or the machine rebooted."""
    return f"{_HOST}-{_boot_id()}-{os.getpid()}-{_start_time(os.getpid()) or 0}-" \
           f"{secrets.token_hex(3)}"


def _parse_token(text: str) -> _Owner | None:
    m = _TOKEN_RE.fullmatch(text)
    return _Owner(m[1], m[2], int(m[3]), m[4]) if m else None


def _alive(owner: _Owner) -> bool:
    if owner.host != _HOST:
        return True  # another machine (shared filesystem): we cannot tell, so keep it
    if owner.boot != "0" and _boot_id() not in ("0", owner.boot):
        return False  # made before the last reboot
    try:
        os.kill(owner.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    start = _start_time(owner.pid)
    return owner.start == "0" or start is None or start == owner.start


def run_token() -> str:
    """This run's identity (host-boot-pid-start-random), as temp dirs and run states record it."""
    return _run_token()


def live_owner(token: str) -> int | None:
    """The pid of the speckit run a token names when that run is still alive, else None."""
    owner = _parse_token(token)
    return owner.pid if owner is not None and _alive(owner) else None


def remove_path(path: Path) -> None:
    """Delete a file, a symlink (never what it points to) or a directory tree."""
    _remove(path)


def remove_stale_temp_dirs(out: str | os.PathLike) -> list[Path]:
    """Remove temp/old dirs beside ``out`` left by runs that no longer exist (kill -9, power
    loss); those of live runs are kept. Returns what was removed."""
    out = Path(out)
    pat = re.compile(rf"\.{re.escape(out.name)}\.(?:tmp|old)-(.+)")
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(out.parent):
            m = pat.fullmatch(entry.name)
            owner = _parse_token(m[1]) if m else None
            if owner is not None and not _alive(owner):
                _remove(Path(entry.path))
                removed.append(Path(entry.path))
    return removed


# ---- signals -------------------------------------------------------------------------------------

def _raise_terminated(signum, frame):
    raise Terminated(f"terminated by signal {signum}")


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the duration, SIGTERM raises Terminated (a KeyboardInterrupt): cleanup runs as for
    Ctrl-C. The previous handler is restored after. Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _deferred_sigterm(*, deliver: bool = True) -> Iterator[None]:
    """Hold SIGTERM during a rename or a cleanup (a half-done one is worse than either); with
    ``deliver`` it is raised, as Terminated, right after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)
    if got and deliver:
        raise Terminated(f"terminated by signal {got[0]}")


# ---- no code in outputs --------------------------------------------------------------------------

def is_code_file(path: Path) -> bool:
    """Code by name (.py, .so, ...) or by a #! first line."""
    if path.suffix.lower() in CODE_SUFFIXES or path.name == "__pycache__":
        return True
    if path.suffix.lower() in _WEIGHT_SUFFIXES or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def strip_config(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``config`` without the keys that load remote code, and the dotted keys removed
    (nested configs too: text_config.auto_map is read by composite models)."""
    dropped: list[str] = []

    def walk(d: dict[str, Any], prefix: str) -> dict[str, Any]:
        kept = {}
        for k, v in d.items():
            if k in REMOTE_CODE_KEYS:
                dropped.append(prefix + k)
            else:
                kept[k] = walk(v, f"{prefix}{k}.") if isinstance(v, dict) else v
        return kept

    return walk(config, ""), dropped


def _is_config_json(name: str) -> bool:
    return name.endswith("config.json") and not name.startswith("speckit-")


def strip_remote_code(directory: str | os.PathLike, *,
                      source: str | os.PathLike | None = None) -> list[str]:
    """Delete code files under ``directory`` and remote-code keys from its *config.json files.

    Every writer runs it before writing provenance (atomic_output_dir runs it again as a guard
    before publishing). ``source``: the input checkpoint, whose code files and remote-code keys
    are listed too (what the output does not carry). Returns what was dropped, e.g.
    ``["config.json: auto_map", "modeling_x.py"]``.
    """
    root = Path(directory)
    dropped = _source_remote_code(Path(source)) if source is not None else []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        for d in list(dirnames):
            if d == "__pycache__":
                shutil.rmtree(here / d, ignore_errors=True)
                dirnames.remove(d)
                dropped.append(str((here / d).relative_to(root)))
        for f in filenames:
            p = here / f
            if is_code_file(p):
                p.unlink()
                dropped.append(str(p.relative_to(root)))
            elif here == root and _is_config_json(f) and not p.is_symlink():
                dropped += [f"{f}: {k}" for k in _strip_json_file(p)]
    return sorted(set(dropped))


def _source_remote_code(src: Path) -> list[str]:
    """The code files at the top of a source checkpoint and the remote-code keys of its configs."""
    found = []
    with contextlib.suppress(OSError):
        for entry in sorted(os.scandir(src), key=lambda e: e.name):
            p = Path(entry.path)
            if is_code_file(p):
                found.append(entry.name)
            elif _is_config_json(entry.name) and entry.is_file():
                with contextlib.suppress(OSError, ValueError, RecursionError):
                    data = json.loads(p.read_text())
                    if isinstance(data, dict):
                        found += [f"{entry.name}: {k}" for k in strip_config(data)[1]]
    return found


def _strip_json_file(path: Path) -> list[str]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return []  # not JSON we can read: not a config transformers would read either
    if not isinstance(data, dict):
        return []
    clean, dropped = strip_config(data)
    if dropped:
        write_json(path, clean)
    return dropped


@dataclass
class ExtraFiles:
    """Small source files copied beside the weights, and those left out on purpose (why)."""

    copied: list[str] = field(default_factory=list)
    dropped: dict[str, str] = field(default_factory=dict)


def copy_extra_files(src: str | os.PathLike, dst: str | os.PathLike,
                     names: list[str] | None = None, *,
                     skip: frozenset[str] | set[str] = frozenset()) -> ExtraFiles:
    """Copy tokenizer/generation files from ``src`` into ``dst``; never code, never weights.

    ``names``: exactly these files (a listed code file is dropped and recorded); None: every
    small regular file at the top of ``src`` except weights, hidden files and ``skip``.
    A symlink is followed only inside ``src`` or into the HF cache's blob store.
    """
    src, dst = Path(src), Path(dst)
    listed = names is not None
    result = ExtraFiles()
    for name in (names if listed else sorted(p.name for p in src.iterdir())):
        p = src / name
        if not listed and (name in skip or name.startswith(".") or
                           name.lower().endswith(_WEIGHT_SUFFIXES) or p.is_dir()):
            continue
        if is_code_file(p):
            result.dropped[name] = "code: never written into an output"
            continue
        try:
            real = safe_relpath(src, name, what="extra file")
        except FormatError:
            if listed:
                raise
            result.dropped[name] = "symlink outside the checkpoint"
            continue
        if not real.is_file():
            if listed:
                raise FormatError(f"{p}: not a regular file", hint="remove it from the source")
            continue
        shutil.copyfile(real, dst / name)
        result.copied.append(name)
    return result


# ---- provenance ----------------------------------------------------------------------------------

def write_provenance(directory: str | os.PathLike, record: Mapping[str, Any], *, command: str,
                     code_dropped: list[str] | Mapping[str, str] = (),
                     name: str = PROVENANCE) -> str:
    """Write the provenance file of an output: speckit's version, the command, the command's own
    record, and whatever remote code was kept out. Returns the file name."""

    data = {"speckit_version": __version__, "command": command, **record,
            "remote_code_dropped": (dict(code_dropped) if isinstance(code_dropped, Mapping)
                                    else list(code_dropped))}
    write_json(Path(directory) / name, data)
    return name


__all__ = [
    "PROVENANCE", "REMOTE_CODE_KEYS", "RUN_STATE", "ExtraFiles", "Interrupted", "Terminated",
    "atomic_output_dir", "check_output", "check_replaceable", "copy_extra_files",
    "is_code_file", "is_speckit_output", "live_owner", "output_errors", "remove_path",
    "remove_stale_temp_dirs", "run_token",
    "sigterm_as_interrupt", "strip_config", "strip_remote_code", "write_provenance",
]
