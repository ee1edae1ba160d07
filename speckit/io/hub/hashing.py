"""sha256 of checkpoint files, and the per-commit sidecar that remembers listings and digests.

The memo is keyed like git's index (real path, size, mtime, ctime, inode) and never trusts a
file changed within its filesystem's clock granularity ("racy"), so a re-hash is never skipped
wrongly.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from speckit.errors import FormatError
from speckit.io.checkpoint import advise_sequential, write_json

HASH_CHUNK = 8 * 1024 * 1024
HASH_WINDOW = 64 * 1024 * 1024  # a multiple of mmap.ALLOCATIONGRANULARITY
HASH_STEP = 1024 * 1024  # bytes per hashlib call: pages fault in (and read ahead) as it goes
# a file changed within this long of being hashed may keep its mtime (coarse clocks): not memoized
RACY_WINDOW_NS = 2_000_000_000  # coarse timestamps (FAT's 2 s, 1 s network mounts)
FINE_RACY_WINDOW_NS = 50_000_000  # ns timestamps (ext4, xfs, btrfs): they tick every <= 10 ms


def sha256_file(path: Path) -> str:
    """sha256 of a file, hashed straight from its pages (read-only mappings of HASH_WINDOW bytes,
    advised sequential so the kernel reads ahead from disk while we hash) rather than copied
    through read() buffers first: ~12% less CPU with the file cached, as fast as read() when it
    is not. One window is mapped at a time, so resident memory stays at one window."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        advise_sequential(f.fileno())
        pos = 0
        while pos < size:
            n = min(HASH_WINDOW, size - pos)
            try:
                window = mmap.mmap(f.fileno(), n, prot=mmap.PROT_READ, offset=pos)
            except (OSError, ValueError, AttributeError):  # no mmap for this file: read() it
                break
            with window:
                if hasattr(window, "madvise"):
                    window.madvise(mmap.MADV_SEQUENTIAL)
                view = memoryview(window)
                try:
                    for i in range(0, n, HASH_STEP):
                        h.update(view[i:i + HASH_STEP])
                finally:
                    view.release()
            pos += n
        f.seek(pos)
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def git_blob_sha1(path: Path) -> str:
    """The git object id of a file (what the Hub lists as `oid` for non-LFS files)."""
    h = hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class Remote:
    """One file of a repo listing: size, git blob id and (for LFS files) sha256."""

    size: int | None  # None when the listing was rebuilt from disk (nothing to compare with)
    blob_id: str | None = None
    lfs_sha256: str | None = None


def _memo_stamp(st: os.stat_result) -> list[int]:
    """What the hash memo keys a file's bytes by (git's index uses the same fields)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _racy_window_ns(st: os.stat_result) -> int:
    """How long after its last change a file could change again without moving its timestamps.
    Filesystems with sub-millisecond timestamps tick per jiffy or finer; anything else (round
    values) gets the 2 s of the coarsest filesystems."""
    fine = st.st_mtime_ns % 1_000_000 or st.st_ctime_ns % 1_000_000
    return FINE_RACY_WINDOW_NS if fine else RACY_WINDOW_NS


class Sidecar:
    """Per-commit speckit facts kept beside the HF cache: the Hub listing and a hash memo.

    The memo (keyed by real path + size + mtime + ctime + inode, like git's index) lets a cache-hit
    fetch of a 100 GB target skip re-hashing; --verify never trusts it.
    """

    def __init__(self, path: Path):
        self.path = path
        self.listing: dict[str, Remote] | None = None
        self.hashes: dict[str, dict] = {}
        self.dirty = False
        try:
            data = json.loads(path.read_text())
            if data.get("version") == 1:
                if data.get("listing") is not None:
                    self.listing = {k: Remote(**v) for k, v in data["listing"].items()}
                self.hashes = dict(data.get("hashes") or {})
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # absent or unreadable: it is only a cache

    def set_listing(self, listing: dict[str, Remote]) -> None:
        self.listing = listing
        self.dirty = True

    def known(self, path: Path) -> str | None:
        """The remembered sha256 of ``path`` if the file has not changed since, else None."""
        real = os.path.realpath(path)
        memo = self.hashes.get(real)
        if memo and memo.get("stamp") == _memo_stamp(os.stat(real)):
            return memo["sha256"]
        return None

    def sha256(self, path: Path, *, trust_memo: bool = True) -> str:
        if trust_memo and (digest := self.known(path)) is not None:
            return digest
        real = os.path.realpath(path)
        st = os.stat(real)
        window = _racy_window_ns(st)
        wait = max(st.st_mtime_ns, st.st_ctime_ns) + window - time.time_ns()
        if 0 < wait and window <= FINE_RACY_WINDOW_NS:
            # just written (a download that finished a moment ago): waiting out the few ms of
            # the racy window lets the digest be remembered, so the next fetch or convert of
            # this file does not hash it again
            time.sleep(wait / 1e9)
            st = os.stat(real)
        stamp = _memo_stamp(st)
        started = time.time_ns()
        digest = sha256_file(Path(real))
        # a file written within the clock granularity of this hash could change without moving
        # its mtime ("racy" in git's words): only remember hashes of files older than that
        # (and only if it did not change while being hashed)
        if max(st.st_mtime_ns, st.st_ctime_ns) <= started - window and \
                stamp == _memo_stamp(os.stat(real)):
            self.hashes[real] = {"stamp": stamp, "sha256": digest}
            self.dirty = True
        else:
            self.hashes.pop(real, None)
        return digest

    def save(self) -> None:
        if not self.dirty:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            listing = ({k: vars(v) for k, v in sorted(self.listing.items())}
                       if self.listing is not None else None)
            write_json(self.path, {"version": 1, "listing": listing, "hashes": self.hashes})
            self.dirty = False
        except OSError:
            pass  # read-only cache: lose the memo, never the fetch


class BesideCopyHasher:
    """sha256 of the files under ``root`` a copy reads, computed beside the copy on up to
    CPU-count threads (hashlib releases the GIL; the copy runs in the kernel).

    A file is queued for hashing when the copy opens it, so the hash reads pages the copy has
    just brought in (one stream of disk reads, not one per shard) and files are hashed in copy
    order; the rest (config, index, files the copy never opens) are queued at join().

    Known digests are reused: ``known`` (speckit fetch's, checked against the Hub's LFS sha256),
    the ``fetch_memos`` sidecars a fetch left beside a snapshot, and the memo at ``memo_path``
    keyed like git's index (real path, size, mtime, ctime, inode), so hashing the same bytes
    again is skipped.
    """

    def __init__(self, root: Path, files: list[str], *, known: dict[str, str],
                 fetch_memos: list[Path], memo_path: Path):
        self.root, self.files = root, files
        self.memo = Sidecar(memo_path)
        self.result: dict[str, dict[str, object]] = {}
        self._errors: list[BaseException] = []
        fetched = [Sidecar(m) for m in fetch_memos if m.is_file()]
        self._todo: set[str] = set()
        for name in files:
            path = root / name
            size = path.stat().st_size
            if digest := known.get(name) or next(
                    (d for f in fetched if (d := f.known(path)) is not None), None):
                self.result[name] = {"size": size, "sha256": digest, "from": "fetch"}
            elif digest := self.memo.known(path):
                self.result[name] = {"size": size, "sha256": digest, "from": "memo"}
            else:
                self._todo.add(name)
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._queued: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._max = max(1, os.cpu_count() or 1)

    def opened(self, name: str) -> None:
        """The copy opened file ``name``: hash it now, beside the copy."""
        if name not in self._todo or name in self._queued:
            return
        self._queued.add(name)
        self._queue.put(name)
        if len(self._threads) < min(self._max, len(self._todo)):
            t = threading.Thread(target=self._work, daemon=True,
                                 name=f"speckit-hash-{len(self._threads)}")
            self._threads.append(t)
            t.start()

    def _work(self) -> None:
        while (name := self._queue.get()) is not None:
            try:
                path = self.root / name
                self.result[name] = {"size": path.stat().st_size,
                                     "sha256": self.memo.sha256(path)}
            except Exception as e:  # noqa: BLE001 (re-raised by join in the main thread)
                self._errors.append(e)

    def join(self) -> dict[str, dict[str, object]]:
        """Every file's {size, sha256[, from]}, once all are hashed; FormatError on a failure."""

        rest = sorted(self._todo - self._queued, key=lambda n: -(self.root / n).stat().st_size)
        for name in rest:
            self.opened(name)
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        if self._errors:
            raise FormatError(f"hashing the source failed: {self._errors[0]}")
        self.memo.save()
        return {name: self.result[name] for name in self.files}
