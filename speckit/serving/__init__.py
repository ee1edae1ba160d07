"""`speckit bench`: measure a vLLM OpenAI-compatible deployment under online load (throughput,
TTFT/TPOT/ITL, acceptance from /metrics), the baseline, static k, a k schedule and untrained
methods side by side, either on servers speckit starts or on the user's own endpoints.

Named `serving` (not `bench`) so the package is not confused with the repository's bench/ scripts.
"""

from __future__ import annotations

from speckit.serving.options import BenchOptions
from speckit.serving.report import BenchReport
from speckit.serving.run import BenchError
from speckit.serving.workflow import bench

__all__ = ["BenchError", "BenchOptions", "BenchReport", "bench"]
