"""Child process for tests/convert/test_convert_aux_vllm.py: which target layers vLLM 0.32's own
model runners take from converted drafts.

`python tests/support/vllm_aux_child.py dirs.json out.json`: for each draft directory, vLLM parses
its config (SpeculatorsConfig.from_pretrained, the class vLLM loads speculators drafts with), then
its V1 runner (GPUModelRunner._get_eagle3_aux_layers_from_config) and its V2 runner
(get_eagle3_aux_layers_from_config) say which aux layers they would capture. No engine starts.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace


def main(spec: str, out: str) -> None:
    from vllm.transformers_utils.configs.speculators.base import SpeculatorsConfig
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
    )
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    results = {}
    for name, path in json.loads(Path(spec).read_text()).items():
        try:
            hf = SpeculatorsConfig.from_pretrained(path)
            sc = SimpleNamespace(draft_model_config=SimpleNamespace(hf_config=hf))
            v1 = GPUModelRunner._get_eagle3_aux_layers_from_config(
                SimpleNamespace(speculative_config=sc))
            v2 = get_eagle3_aux_layers_from_config(sc)
            results[name] = {"ok": True, "v1": list(v1 or []), "v2": list(v2 or [])}
        except Exception:  # noqa: BLE001 (recorded for the test to show)
            results[name] = {"ok": False, "traceback": traceback.format_exc()}
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
