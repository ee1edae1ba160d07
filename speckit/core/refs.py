"""Hub reference syntax: the one repo-id pattern, commit shas, revisions and ``owner/name@rev``;
and the two rules for strings that come back from a server: escape them, redact credentials.

Pure string checks (no filesystem, no network); every module that asks "is this a repo id?",
"is this a revision?" or "may I print this?" asks here.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

from speckit.errors import UsageError

# owner/name: letters, digits, '-', '_', '.'; no leading '-' or '.', at most 96 characters a part,
# and no '--' or '..' anywhere (the Hub refuses both; '--' would also clash with cache folder names)
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
# a branch or tag name: git's check-ref-format rules, narrowed to the characters Hub refs use.
# Components separated by single '/', none empty, none starting with '.', none ending in '.lock';
# no '..' anywhere; at most 255 characters. A revision ends up as a path under the cache's refs/
# folder, so this is what keeps it there.
_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$")
REVISION_MAX = 255
# C0 and C1 control characters, DEL, and the Unicode format characters that reorder or hide text
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069"
                          "\ufeff]")
# the user:password of a URL: everything up to the authority's last '@' (a password may hold an
# unescaped '@' of its own, and none of it may stay)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s]+@")


def is_repo_id(value: str) -> bool:
    """True for a well-formed Hub model repo id (``owner/name``)."""
    return bool(REPO_ID.match(value)) and ".." not in value and "--" not in value


def check_repo_id(value: str) -> str:
    """``value`` if it is a Hub model repo id, else a UsageError saying how to write one."""
    if not is_repo_id(value):
        raise UsageError(f"{value!r} is not a Hub repo id",
                         hint="write it as owner/name (your user name or an organization)")
    return value


def is_commit_sha(value: str) -> bool:
    """True for a full 40-hex git commit sha (what a pinned revision must be)."""
    return bool(COMMIT_SHA.match(value))


def is_revision(value: object) -> bool:
    """True for a 40-hex commit sha or a well-formed branch or tag name (``refs/pr/1`` too)."""
    if not isinstance(value, str) or not value or len(value) > REVISION_MAX:
        return False
    if is_commit_sha(value):
        return True
    return bool(_REVISION.fullmatch(value)) and ".." not in value and not any(
        part.endswith((".lock", ".")) for part in value.split("/"))


def revision_problem(value: object) -> str | None:
    """None for a good revision, else why it is refused (for an error message)."""
    if is_revision(value):
        return None
    if not isinstance(value, str):
        return f"is a {type(value).__name__}, not a string"
    return (f"'{printable(value)}' is neither a 40-hex commit sha nor a branch or tag name "
            "(letters, digits, '_', '-', '.', '+', components joined by single '/'; no '..', "
            "no leading '.', '/' or '-')")


def has_unprintable(value: str) -> bool:
    """True when ``value`` holds a control or text-direction character (never in a real name)."""
    return bool(_UNPRINTABLE.search(value))


def printable(value: object) -> str:
    """``value`` as text safe for a terminal: control, escape and text-direction characters
    written as escapes (\\x1b, \\n, \\u202e), so a server string cannot forge lines or
    drive the terminal."""
    text = str(value)
    if not _UNPRINTABLE.search(text):
        return text
    return _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def redact_url(text: str) -> str:
    """``text`` with the user:password part of every URL in it replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """``scheme://user:password@host/path`` -> (the URL without ``user:password@``, user,
    password), both percent-decoded; a URL without them comes back whole with (None, None)."""
    parts = urlsplit(url)
    userinfo, at, hostport = parts.netloc.rpartition("@")
    if not at:
        return url, None, None
    user, _, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=hostport)), unquote(user), unquote(password)


def split_revision(ref: str) -> tuple[str, str | None]:
    """``"org/name@rev"`` -> ``("org/name", "rev")``; a ref without a well-formed ``@rev`` suffix
    comes back whole with ``None`` (so a path holding '@' is never cut)."""
    head, sep, rev = ref.rpartition("@")
    if sep and is_repo_id(head) and is_revision(rev):
        return head, rev
    return ref, None


def check_revision(value: object, *, what: str = "revision") -> str:
    """``value`` if it is a commit sha or a branch/tag name, else a UsageError naming ``what``:
    the one check every entry point (flags, ``@rev``, registry entries, lock files, cards) uses."""
    problem = revision_problem(value)
    if problem is not None:
        raise UsageError(f"{what}: {problem}",
                         hint="pass a branch or tag name (main, v1.0, refs/pr/1) or a full "
                         "40-hex commit sha")
    return value  # type: ignore[return-value]
