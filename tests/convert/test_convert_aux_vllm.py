"""vLLM 0.32's own runners read the aux ids convert wrote as the layers the draft was trained on:
each source layout of tests/convert/test_convert_aux.py converted, then vLLM parses the output
config and its V1 and V2 model runners say which layers they capture (no engine starts; one
child process imports vLLM once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from speckit.convert import convert
from tests.convert.test_convert_aux import CASES
from tests.support import factories as F

pytestmark = pytest.mark.vllm

CHILD = Path(__file__).parents[1] / "support" / "vllm_aux_child.py"


@pytest.fixture(scope="module")
def vllm_reads(tmp_path_factory):
    root = tmp_path_factory.mktemp("aux-vllm")
    targets = {"llama": F.make_target(root / "llama"),
               "qwen3": F.make_target(root / "qwen3", arch="qwen3")}
    outs = {}
    for name, (make, arch, _, _) in CASES.items():
        outs[name] = str(convert(make(root / name), target=targets[arch],
                                 out=root / f"{name}-out").out)
    spec, res = root / "dirs.json", root / "reads.json"
    spec.write_text(json.dumps(outs))
    subprocess.run([sys.executable, str(CHILD), str(spec), str(res)], check=True, timeout=600,
                   cwd=Path(__file__).parents[2])
    return json.loads(res.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_both_runners_capture_the_trained_layers(name, vllm_reads):
    got = vllm_reads[name]
    assert got["ok"], got.get("traceback")
    want = CASES[name][3]
    assert got["v1"] == want and got["v2"] == want
