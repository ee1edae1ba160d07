"""`speckit bench`: measure a vLLM OpenAI-compatible deployment under online load (throughput,
TTFT/TPOT/ITL, acceptance from /metrics), the baseline, static k, a k schedule and untrained
methods side by side, either on servers speckit starts or on the user's own endpoints.

The package is named for its command, as convert/, quant/ and validate/ are. The repository's
top-level benchmarks/ folder is another thing: the project's benchmark scripts, which speckit never
imports.
"""

from __future__ import annotations

from speckit.bench.options import BenchOptions
from speckit.bench.report import BenchReport
from speckit.bench.run import BenchError
from speckit.bench.workflow import bench

__all__ = ["BenchError", "BenchOptions", "BenchReport", "bench"]
