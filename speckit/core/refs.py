"""Hub reference syntax: the one repo-id pattern, commit shas and ``owner/name@revision``.

Pure string checks (no filesystem, no network); every module that asks "is this a repo id?"
asks here.
"""

from __future__ import annotations

import re

# owner/name: letters, digits, '-', '_', '.'; no leading '-' or '.', at most 96 characters a part,
# and no '--' or '..' anywhere (the Hub refuses both; '--' would also clash with cache folder names)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
# a branch or tag name as a revision (after '@'): no spaces, no '..', no leading '/' or '-'
_REVISION = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]*$")


def is_repo_id(value: str) -> bool:
    """True for a well-formed Hub model repo id (``owner/name``)."""
    return bool(REPO_ID.match(value)) and ".." not in value and "--" not in value


def is_commit_sha(value: str) -> bool:
    """True for a full 40-hex git commit sha (what a pinned revision must be)."""
    return bool(COMMIT_SHA.match(value))


def is_revision(value: str) -> bool:
    """True for a plausible branch, tag or commit name."""
    return bool(_REVISION.match(value)) and ".." not in value


def split_revision(ref: str) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ``("org/name", "rev")``; a ref without a well-formed ``@rev`` suffix
    comes back whole with ``None`` (so a path holding '@' is never cut)."""
    head, sep, rev = ref.rpartition("@")
    if sep and is_repo_id(head) and is_revision(rev):
        return head, rev
    return ref, None
