"""`speckit plan` end to end on tiny local checkpoints and through a local Hub-protocol server.

Checks the CLI contract (table, --json, exit codes, error messages) and that Hub repos are read
header-only: config.json plus range requests into the safetensors files, never a whole body.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import speckit.api as sk
from speckit.cli import main
from speckit.core.jsonable import to_jsonable as jsonable
from speckit.plan import plan_from_refs
from tests.support import hubserver
from tests.support.factories import (
    Dims,
    make_causal_lm,
    make_spec_dflash,
    make_spec_eagle3,
    make_target,
)
from tests.support.registries import write_registry

hub_server = hubserver.hub_server
hub = hubserver.hub

SMALL = {"hidden": 256, "heads": 4, "kv_heads": 2, "head_dim": 64, "intermediate": 512,
         "vocab": 1000}
D_SMALL = Dims(hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512, vocab=1000,
               draft_vocab=200, target_layers=8, block_size=4)


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("plan")
    target = make_target(d / "target", arch="llama", num_layers=8, **SMALL)
    eagle = make_spec_eagle3(d / "eagle3", dims=D_SMALL, seed=0)  # same embedding bytes as target
    other = make_spec_eagle3(d / "eagle3_own", dims=D_SMALL, seed=7)  # its own embedding
    return target, eagle, other


def run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["plan", *args])
    return r.exit_code, r.output


def test_table_verdict_and_draft_cost(pair):
    target, eagle, _ = pair
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu", "MI300X",
                    "--max-model-len", "2048")
    assert code == 0, out
    for text in ("target weights", "draft weights", "KV bytes / token", "available KV memory",
                 "KV tokens", "requests at 2,048 tokens + 3 lookahead", "RESULT: vLLM starts",
                 "assumptions:", "MI300X"):
        assert text in out, text
    # 8 layers x 2 KV heads x 128 x 2 B = 4,096 B/token; the EAGLE-3 layer adds 512
    assert "4,096 B" in out and "4,608 B" in out


def test_json_is_the_plan_result(pair):
    target, eagle, _ = pair
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu", "H100",
                    "--max-model-len", "2048", "--json")
    assert code == 0
    whole = json.loads(out)
    data = whole["plan"]
    assert data["method"] == "eagle3" and data["k"] == 3 and data["verdict"] == "starts"
    assert data["kv"]["target_bytes_per_token"] == 4096
    assert data["kv"]["draft_bytes_per_token"] == 512
    direct = plan_from_refs(target=str(target), draft=str(eagle), gpu="H100", max_model_len=2048)
    assert data["with_draft"]["kv_tokens"] == direct.with_draft.kv_tokens
    # the library's answer is the one --json prints: speckit.api.plan returns the speed too
    api = sk.plan(target=str(target), draft=str(eagle), gpu="H100", max_model_len=2048)
    assert whole == json.loads(json.dumps(jsonable(api)))
    assert whole["speed"] is not None and whole["acceptance"]["origin"] == "prior"


def test_local_pair_embedding_identity_is_checked(pair):
    target, same, own = pair
    shared = plan_from_refs(target=str(target), draft=str(same), gpu="H100", max_model_len=2048)
    kept = plan_from_refs(target=str(target), draft=str(own), gpu="H100", max_model_len=2048)
    assert "embed_tokens.weight" in shared.weights.draft_borrowed
    # the distinct [1000 -> 1024 padded, 256] bf16 embedding is counted: 1024 x 256 x 2 B
    assert kept.weights.draft_bytes - shared.weights.draft_bytes == 1024 * 256 * 2


def test_will_not_start_exits_1_with_try_lines(pair):
    target, eagle, _ = pair
    # 0.05 GiB device: the 0.35 GiB runtime alone does not fit
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu-mem-gib", "0.05",
                    "--max-model-len", "2048")
    assert code == 1
    assert "RESULT: vLLM will not start" in out and "x weights and runtime need" in out


def test_parallel_drafter_token_budget(tmp_path, pair):
    target, _, _ = pair
    dflash = make_spec_dflash(tmp_path / "dflash", dims=D_SMALL, num_layers=2)
    code, out = run("--target", str(target), "--draft", str(dflash), "--gpu", "H200",
                    "--max-model-len", "2048", "--max-num-seqs", "512",
                    "--max-num-batched-tokens", "1024")
    assert code == 1
    assert "max_num_seqs 512 x 4 = 2048" in out
    assert "try --max-num-batched-tokens 2048" in out


def test_draft_model_is_detected_and_needs_k(tmp_path, pair):
    target, _, _ = pair
    lm = make_causal_lm(tmp_path / "lm", arch="llama", num_layers=2, hidden=128, heads=2,
                        kv_heads=1, head_dim=64, intermediate=256, vocab=1000)
    # a plain causal LM is detected as draft_model (speckit.core.methods.detect), whose k is not
    # recorded anywhere
    code, out = run("--target", str(target), "--draft", str(lm), "--gpu", "H200")
    assert code == 2 and "method draft_model" in out and "pass -k" in out
    code, out = run("--target", str(target), "--draft", str(lm), "--method", "draft_model",
                    "-k", "4", "--gpu", "H200", "--max-model-len", "2048", "--json")
    assert code == 0
    data = json.loads(out)["plan"]
    # 2 layers x 1 KV head x 128 x 2 B = 512 B/token of draft KV
    assert data["kv"]["draft_bytes_per_token"] == 512 and data["lookahead_slots"] == 4


def test_errors_name_what_is_wrong(pair):
    target, eagle, _ = pair
    code, out = run("--target", str(target), "--gpu", "TPUv9")
    assert code == 2 and "MI355X" in out and "B200" in out and "--gpu-mem-gib" in out
    code, out = run("--target", str(target), "--tp", "3", "--gpu", "H200")
    assert code == 7 and "num_attention_heads=4 is not divisible by tp=3" in out
    assert "valid --tp values: 1, 2, 4" in out
    smol = make_target(target.parent / "other_target", arch="llama", num_layers=4, hidden=128,
                       heads=2, kv_heads=1, head_dim=64, intermediate=256, vocab=1000)
    code, out = run("--target", str(smol), "--draft", str(eagle), "--gpu", "H200")
    assert code == 7 and "does not fit the target" in out and "hidden_size 128" in out


def test_hub_repos_are_read_header_only(hub, pair):
    target, eagle, _ = pair
    for repo, src in (("org/tiny-target", target), ("org/tiny-eagle3", eagle)):
        hub.server.add_commit(repo, {p.name: p.read_bytes() for p in src.iterdir()})
    r = plan_from_refs(target="org/tiny-target", draft="org/tiny-eagle3", gpu="H100",
                       max_model_len=2048)
    local = plan_from_refs(target=str(target), draft=str(eagle), gpu="H100", max_model_len=2048)
    # same numbers, except that identity of the shipped embedding cannot be checked remotely
    assert r.kv == local.kv and r.weights.target_bytes == local.weights.target_bytes
    assert r.weights.draft_bytes == local.weights.draft_bytes + 1024 * 256 * 2
    assert any("counted as its own" in n for n in r.weights.notes)
    st = hub.server.body_gets("model.safetensors")
    assert st, "the safetensors headers were not read"
    for req in st:  # every read of the weights file is a small range request
        assert req.range is not None and req.status == 206, req
        a, _, b = req.range[6:].partition("-")
        assert int(b or 0) - int(a or 0) < 200_000


def test_registry_id_resolves_draft_and_its_target(hub, pair, tmp_path, monkeypatch):
    target, eagle, _ = pair
    for repo, src in (("org/tiny-target", target), ("org/tiny-eagle3", eagle)):
        hub.server.add_commit(repo, {p.name: p.read_bytes() for p in src.iterdir()})
    reg = write_registry(tmp_path / "registry.toml", id="tiny-eagle3", license="apache-2.0",
                         repo="org/tiny-eagle3", num_speculative_tokens=2)
    monkeypatch.setenv("SPECKIT_REGISTRY", str(reg))
    code, out = run("--draft", "tiny-eagle3", "--gpu", "B200", "--max-model-len", "2048",
                    "--json")
    assert code == 0, out
    data = json.loads(out)["plan"]
    assert data["target"] == "org/tiny-target" and data["draft"] == "tiny-eagle3"
    assert data["method"] == "eagle3" and data["kv"]["draft_bytes_per_token"] == 512
    assert data["k"] == 3  # the draft's config records k=3; the registry's 2 is only a fallback


def _error_lines(out: str) -> tuple[str, str]:
    assert "Traceback" not in out, out
    lines = out.splitlines()
    err = [x for x in lines if x.startswith("error: ")]
    hint = [x for x in lines if x.startswith("hint: ")]
    assert len(err) == 1 and len(hint) == 1, out
    return err[0], hint[0]


@pytest.mark.parametrize("args", [
    ("--max-num-seqs", "0"), ("--max-num-batched-tokens", "0"),
    ("--max-num-batched-tokens", "-4"), ("--kv-cache-memory-bytes", "0"),
    ("--max-model-len", "0"), ("--max-model-len", "-1"), ("--tp", "0"), ("--draft-tp", "0"),
    ("--gpu-memory-utilization", "0"), ("--gpu-memory-utilization", "1.5"),
    ("--gpu-memory-utilization", "nan"), ("--gpu-mem-gib", "inf"), ("--gpu-mem-gib", "nan"),
    ("--gpu-mem-gib", "-8"), ("-k", "0"),
])
def test_bad_numbers_exit_2_with_error_and_hint(pair, args):
    target, _, _ = pair
    gpu = () if args[0] == "--gpu-mem-gib" else ("--gpu", "H200")
    code, out = run("--target", str(target), *gpu, *args)
    assert code == 2, out
    err, hint = _error_lines(out)
    assert err.startswith(f"error: {args[0]} must be"), err
    assert len(hint) > len("hint: ")


def test_bad_numbers_fail_before_any_reference_is_read():
    # the target does not exist: the flag is still what gets reported
    code, out = run("--target", "/nonexistent/model", "--gpu", "H200", "--max-num-seqs", "0")
    assert code == 2 and "error: --max-num-seqs" in out


@pytest.mark.parametrize(("field", "value"), [("num_key_value_heads", 0),
                                              ("num_attention_heads", -4),
                                              ("num_hidden_layers", 2.5), ("hidden_size", 0)])
def test_impossible_config_field_exits_3_naming_config_json(tmp_path, field, value):
    target = make_target(tmp_path / "t", arch="llama", num_layers=2, **SMALL)
    cfg = json.loads((target / "config.json").read_text())
    cfg[field] = value
    (target / "config.json").write_text(json.dumps(cfg))
    code, out = run("--target", str(target), "--gpu", "H200")
    assert code == 3, out
    err, hint = _error_lines(out)
    # the typed config reader (core/hfconfig.py) names the file, the field and the value
    assert "config.json" in err and f"{field} is {value!r}" in err, err
    assert hint


def test_max_model_len_above_the_target_is_will_not_start(pair):
    target, eagle, _ = pair
    # the tiny target's max_position_embeddings is 2048; vLLM 0.32 refuses a longer
    # --max-model-len (config/model.py _get_and_verify_max_len raises ValueError)
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu", "H200",
                    "--max-model-len", "4096")
    assert code == 1, out
    assert "RESULT: vLLM will not start" in out and "RESULT: vLLM starts" not in out
    assert "vLLM refuses it" in out and "x max_model_len 4096 is greater than" in out
    assert "try --max-model-len 2048: starts" in out
    for line in out.splitlines():
        if line.strip().startswith("try --max-model-len"):
            assert int(line.split()[2].rstrip(":")) <= 2048, line
    code, out = run("--target", str(target), "--draft", str(eagle), "--gpu", "H200",
                    "--max-model-len", "4096", "--json")
    data = json.loads(out)["plan"]
    assert code == 1 and data["verdict"] == "will not start"
    assert not any("refuses" in c for c in data["checks"])
