"""Child process for tests/convert/test_convert_vllm.py: real vLLM against converted drafts.

`python tests/support/vllm_convert_child.py spec.json out.json`; spec = {"runs": [...]}, each run
either
  {"kind": "generate", "name", "target", "speculative_config"}: start an engine, decode greedily,
      read get_metrics() and record the spec-decode counters;
  {"kind": "load", "name", "target", "speculative_config", "weights": dir, "native_mtp": bool}:
      let vLLM parse the configs (EngineArgs.create_engine_config), build vLLM's draft model
      class, fill every parameter with NaN, run its own load_weights over the converted tensors
      and record which parameters are still NaN (= not provided by the checkpoint).
Results (or errors) are written to out.json after each run, so partial results survive.
"""

from __future__ import annotations

import gc
import glob
import json
import os
import re
import socket
import sys
import time
import traceback
from pathlib import Path

from speckit.io.engine.metrics import metric_snapshot

PROMPTS = ["the quick brown fox jumps over the lazy dog. the quick brown fox",
           "def add(a, b): return a + b. def add(a, b):"]


def generate(run: dict) -> dict:
    from vllm import LLM, SamplingParams

    started = time.monotonic()
    llm = LLM(model=run["target"], tokenizer=run["target"],
              speculative_config=run["speculative_config"], enforce_eager=True,
              disable_log_stats=False, max_model_len=256, max_num_seqs=2,
              kv_cache_memory_bytes=64 * 1024 * 1024, seed=0, dtype="bfloat16")
    params = SamplingParams(temperature=0.0, max_tokens=run.get("max_tokens", 8), ignore_eos=True)
    outs = llm.generate(PROMPTS, params, use_tqdm=False)
    result = {"ok": True, "token_ids": [list(o.outputs[0].token_ids) for o in outs],
              "counters": metric_snapshot(llm),
              "seconds": round(time.monotonic() - started, 1)}
    del llm
    gc.collect()
    return result


# ---- load proofs --------------------------------------------------------------------------------

_DIST = {"ready": False}


def _native_mtp_weights(weights):
    """speculators `mtp` names -> the target-native names vLLM's MTP loaders read (the inverse of
    speckit's extraction: speculators stitch-mtp does the same), experts unfused again."""
    exact = {"mtp_layers.0.input_proj.weight": "mtp.fc.weight",
             "mtp_layers.0.final_layernorm.weight": "mtp.norm.weight",
             "mtp_layers.0.hidden_layernorm.weight": "mtp.pre_fc_norm_hidden.weight",
             "mtp_layers.0.token_layernorm.weight": "mtp.pre_fc_norm_embedding.weight"}
    for name, t in weights:
        if name in exact:
            yield exact[name], t
        elif name == "mtp_layers.0.mlp.experts.gate_up_proj":
            half = t.shape[1] // 2
            for e in range(t.shape[0]):
                yield f"mtp.layers.0.mlp.experts.{e}.gate_proj.weight", t[e, :half].contiguous()
                yield f"mtp.layers.0.mlp.experts.{e}.up_proj.weight", t[e, half:].contiguous()
        elif name == "mtp_layers.0.mlp.experts.down_proj":
            for e in range(t.shape[0]):
                yield f"mtp.layers.0.mlp.experts.{e}.down_proj.weight", t[e].contiguous()
        else:
            yield re.sub(r"^mtp_layers\.0\.", "mtp.layers.0.", name), t


def load(run: dict) -> dict:
    import torch
    from safetensors import safe_open
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.models.registry import ModelRegistry

    # The V1 runner (the only one on CPU) refuses DSpark and DFlash2 at config time; that is a
    # runner gate, not a format check. Only the gate is skipped so vLLM's own config parsing,
    # model class and load_weights can be exercised; the GPU V2 runner serves these drafts.
    VllmConfig._validate_v1_model_runner = lambda self: None
    args = EngineArgs(model=run["target"], skip_tokenizer_init=True,
                      speculative_config=run["speculative_config"], enforce_eager=True,
                      max_model_len=256, dtype="bfloat16")
    cfg = args.create_engine_config()
    sc = cfg.speculative_config
    hf = sc.draft_model_config.hf_config
    result: dict = {"ok": True, "method": sc.method, "k": sc.num_speculative_tokens,
                    "architectures": list(hf.architectures)}
    for key in ("eagle_aux_hidden_state_layer_ids", "dflash_config", "draft_vocab_size",
                "markov_rank", "markov_head_type", "target_layer_ids", "mask_token_id",
                "block_size", "enable_confidence_head", "confidence_head_with_markov",
                "sample_from_anchor", "n_predict", "num_nextn_predict_layers"):
        if hasattr(hf, key):
            result[key] = getattr(hf, key)
    from vllm.distributed import (
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
    )

    with set_current_vllm_config(cfg):
        if not _DIST["ready"]:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                         distributed_init_method=f"tcp://127.0.0.1:{port}")
            _DIST["ready"] = True
        else:
            destroy_model_parallel()
        # groups follow the current config (an MoE model also gets an expert-parallel group)
        initialize_model_parallel(1, 1)
    model_cls, _ = ModelRegistry.resolve_model_cls(hf.architectures,
                                                    model_config=sc.draft_model_config)
    result["model_class"] = model_cls.__name__
    with set_current_vllm_config(cfg), torch.device("cpu"):
        model = model_cls(vllm_config=cfg)
    shapes = {}
    for name, p in model.named_parameters():
        shapes[name] = list(p.shape)
        if p.dtype.is_floating_point:
            p.data.fill_(float("nan"))

    def weights():
        for f in sorted(glob.glob(os.path.join(run["weights"], "*.safetensors"))):
            with safe_open(f, "pt") as h:
                for n in h.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    yield n, h.get_tensor(n)

    stream = _native_mtp_weights(weights()) if run.get("native_mtp") else weights()
    with set_current_vllm_config(cfg):
        model.load_weights(stream)
    result["parameters"] = shapes
    d2t = getattr(model, "draft_id_to_target_id", None)
    if d2t is not None:  # an int64 parameter: NaN cannot mark it, so report its values
        result["draft_id_to_target_id"] = [int(v) for v in d2t.tolist()]
    result["still_nan"] = sorted(n for n, p in model.named_parameters()
                                 if p.dtype.is_floating_point and bool(torch.isnan(p).any()))
    return result


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    results = {}
    for run in spec["runs"]:
        try:
            fn = load if run.get("kind") == "load" else generate
            results[run["name"]] = fn(run)
        except Exception as e:  # noqa: BLE001 - the parent test reports it
            results[run["name"]] = {"ok": False, "error": f"{type(e).__name__}: {e}",
                                    "traceback": traceback.format_exc()[-4000:]}
        Path(sys.argv[2]).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
