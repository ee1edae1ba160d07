"""matplotlib for the PNG plots validate and bench write: headless (Agg), and optional: without it
the reports are written without their plots, saying so once."""

from __future__ import annotations

from typing import Any

MISSING = "matplotlib is not installed: no PNG plots (pip install matplotlib)"


def pyplot(warnings: list[str] | None = None) -> Any | None:
    """matplotlib.pyplot on the Agg backend, or None (``MISSING`` appended to ``warnings``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if warnings is not None and MISSING not in warnings:
            warnings.append(MISSING)
        return None
    return plt


__all__ = ["MISSING", "pyplot"]
