"""Errors speckit raises on purpose: each names the file, tensor or field at fault and a fix.

The CLI prints ``message`` and ``hint`` on one line each and exits with ``exit_code``. Each class
also subclasses the built-in it means (a usage error is a ValueError, a hub error an OSError), so
library callers can catch them idiomatically.
"""

from __future__ import annotations


class SpeckitError(Exception):
    """A failure the user can act on."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class UsageError(SpeckitError, ValueError):
    """Bad flags, unknown ids, conflicting options."""

    exit_code = 2


class FormatError(SpeckitError, ValueError):
    """A checkpoint, config or registry file that is malformed or structurally wrong."""

    exit_code = 3


class HubError(SpeckitError, OSError):
    """The Hub (or HF_ENDPOINT) could not give us what we asked for."""

    exit_code = 4


class IntegrityError(SpeckitError, OSError):
    """Downloaded or cached bytes that do not match their recorded size or sha256."""

    exit_code = 5


class EngineError(SpeckitError, RuntimeError):
    """vLLM failed to start, crashed or timed out."""

    exit_code = 6


class EngineTimeout(EngineError):
    """vLLM ran past its time limit (the run was ended; nothing it measured came back)."""


class PlanError(SpeckitError, ValueError):
    """A deployment that cannot work (pairing mismatch, TP that does not divide heads, ...)."""

    exit_code = 7


class OutputError(SpeckitError, OSError):
    """The output could not be written: disk full, read-only, not a directory, no permission."""

    exit_code = 8
