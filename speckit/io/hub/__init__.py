"""The Hugging Face Hub through huggingface_hub: settings, file selection, hashing, the lock,
downloads, and errors told apart by exception type.

fetch_snapshot() pins one repo at one commit; the `speckit fetch` operation is speckit.fetch,
and turning any reference into a directory is speckit.io.refs.resolve.
"""

from speckit.io.hub.cache import cached_snapshot, fetch_sidecars, snapshot_of
from speckit.io.hub.download import download_file, safetensors_headers
from speckit.io.hub.errors import (
    OFFLINE_HINT,
    OFFLINE_ON_HINT,
    NotCachedError,
    hub_error,
    is_unreachable,
)
from speckit.io.hub.hashing import Remote, Sidecar, git_blob_sha1, sha256_file
from speckit.io.hub.lock import LOCK_NAME, Lock, default_lock_path
from speckit.io.hub.select import (
    DRAFT_FILES,
    TOKENIZER_FILES,
    Selection,
    check_repo_names,
    select_files,
)
from speckit.io.hub.settings import HubSettings, hub_settings, repo_folder
from speckit.io.hub.snapshot import (
    FetchOptions,
    FileRecord,
    Mismatch,
    Snapshot,
    fetch_snapshot,
    verify_snapshot,
)

__all__ = [
    "DRAFT_FILES", "LOCK_NAME", "OFFLINE_HINT", "OFFLINE_ON_HINT", "TOKENIZER_FILES",
    "FetchOptions", "FileRecord", "HubSettings", "Lock", "Mismatch", "NotCachedError", "Remote",
    "Selection", "Sidecar", "Snapshot", "cached_snapshot", "check_repo_names",
    "default_lock_path", "download_file", "fetch_sidecars", "fetch_snapshot", "git_blob_sha1",
    "hub_error", "hub_settings", "is_unreachable", "repo_folder", "safetensors_headers",
    "select_files", "sha256_file", "snapshot_of", "verify_snapshot",
]
