"""Static FP8 activation scales (--per-tensor-static) from the draft's real inputs.

A plain causal LM (draft_model) reads tokens: it runs through transformers with hooks on its
Linear layers. An EAGLE-3 / P-EAGLE head reads the target's hidden states: the target (a local HF
checkpoint, --calib-target) runs through transformers on a few built-in prompts, and the head's
first drafting step is replayed here (fc -> decoder layers, as vLLM's llama_eagle3 runs it) to
record the largest |input| of every quantized Linear. Other methods are refused, saying why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.core import methods
from speckit.core.methods.common import attn_dims, aux_layer_ids, layer_config
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import Checkpoint

# a handful of short, varied prompts: chat, code, math, prose, lists (activation ranges differ)
PROMPTS = [
    "You are a helpful assistant. Explain in two sentences why the sky looks blue at noon.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    a, b = 0, 1\n",
    "Solve step by step: a train travels 180 km in 2.5 hours. What is its average speed?",
    "The old lighthouse keeper climbed the stairs one last time, counting each step aloud.",
    "List three differences between TCP and UDP, then give one use case for each.",
    "SELECT name, COUNT(*) FROM orders GROUP BY name HAVING COUNT(*) > 10 ORDER BY 2 DESC;",
    "Translate to French: The meeting has been moved to Thursday afternoon.",
    "Q: What is the derivative of x^3 * sin(x)? A: Using the product rule,",
]


@dataclass
class ActivationStats:
    """The largest |input| seen by each quantized Linear (vLLM run-time module name)."""

    amax: dict[str, float]
    method: str
    target: str | None
    prompts: int
    tokens: int
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {"method": self.method, "target": self.target, "prompts": self.prompts,
                "tokens": self.tokens, "input_amax": dict(sorted(self.amax.items())),
                "notes": self.notes}


def collect(ckpt: Checkpoint, method: str, *, modules: list[str], names: dict[str, str],
            calib_target: str | Path | None, prompts: list[str] | None = None,
            target_layers: int | None = None, requant: dict | None = None,
            device: str = "cpu") -> ActivationStats:
    """Run the calibration for the quantized ``modules`` (run-time names; ``names`` maps each
    to a checkpoint tensor name)."""
    if requant is not None:
        raise UsageError("--per-tensor-static cannot calibrate an already quantized input",
                         hint="start from the unquantized checkpoint, or use --fp8 (dynamic "
                         "activations, no calibration)")
    prompts = list(prompts or PROMPTS)
    spec = methods.get(method)
    if spec.activation_inputs == "causal-lm":
        cal = _causal_lm(ckpt, names, calib_target, prompts, device)
    elif spec.activation_inputs == "eagle-head":
        if calib_target is None:
            raise UsageError(
                f"--per-tensor-static needs the {method} draft's real inputs: the hidden states "
                "the target produces",
                hint="pass --calib-target TARGET_DIR (a local Hugging Face checkpoint of the "
                "target; it runs on a few built-in prompts), or use --fp8 (dynamic per-token "
                "activations, no calibration)")
        cal = _eagle3(ckpt, spec, names, Path(calib_target), prompts, device)
    else:
        raise UsageError(
            f"--per-tensor-static calibration is not available for {method} drafts: speckit "
            "replays EAGLE-3 / P-EAGLE heads and plain causal LMs only",
            hint="use --fp8 (per-channel weights + dynamic per-token activations, no "
            "calibration) or --mxfp4")
    missing = [m for m in modules if m not in cal.amax]
    if missing:
        raise FormatError(f"calibration saw no input for {', '.join(missing[:5])}",
                          hint="this is a bug in speckit's replay of the draft")
    for m, v in cal.amax.items():
        if not math.isfinite(v):
            raise FormatError(f"calibration: the input of {m} holds NaN or Inf",
                              hint="the target or the draft weights are broken")
    cal.amax = {m: cal.amax[m] for m in modules}
    return cal


# ---- plain causal LM ----------------------------------------------------------------------------

def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _tokenizer(*dirs: Path | None):
    from transformers import AutoTokenizer

    _quiet_transformers()

    for d in dirs:
        if d is not None and any((Path(d) / f).exists() for f in (
                "tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
            return AutoTokenizer.from_pretrained(str(d))
    raise UsageError("calibration needs a tokenizer and found none",
                     hint="the draft directory (or --calib-target) must hold tokenizer files")


def _causal_lm(ckpt: Checkpoint, names: dict[str, str], calib_target, prompts: list[str],
               device: str) -> ActivationStats:
    import torch
    from transformers import AutoModelForCausalLM

    tok = _tokenizer(ckpt.path, Path(calib_target) if calib_target else None)
    model = AutoModelForCausalLM.from_pretrained(str(ckpt.path), dtype=torch.bfloat16)
    model.to(device).eval()
    by_module = {schemes_module(t): m for m, t in names.items()}
    amax: dict[str, float] = {}
    hooks = []
    for hf_name, layer in model.named_modules():
        if hf_name in by_module:
            runtime = by_module[hf_name]

            def hook(_m, inputs, _out, runtime=runtime):
                v = float(inputs[0].detach().abs().max())
                amax[runtime] = max(amax.get(runtime, 0.0), v)

            hooks.append(layer.register_forward_hook(hook))
    tokens = _run_prompts(tok, prompts, lambda ids: model(input_ids=ids.to(device)))
    for h in hooks:
        h.remove()
    return ActivationStats(amax, "draft_model", None, len(prompts), tokens,
                       notes=["the draft's own forward (transformers) on the built-in prompts"])


def schemes_module(tensor_name: str) -> str:
    return tensor_name.rsplit(".", 1)[0]


def _run_prompts(tok, prompts: list[str], fn) -> int:
    import torch

    n = 0
    with torch.no_grad():
        for p in prompts:
            ids = tok(p, return_tensors="pt")["input_ids"]
            if ids.shape[1] < 2:
                continue
            fn(ids)
            n += int(ids.shape[1])
    return n


# ---- EAGLE-3 / P-EAGLE: replay the head's first step on the target's hidden states -------------

def _eagle3(ckpt: Checkpoint, spec: methods.MethodSpec, names: dict[str, str], target: Path,
            prompts: list[str], device: str) -> ActivationStats:
    import torch
    from transformers import AutoModelForCausalLM


    cfg = ckpt.config
    lc = layer_config(cfg)
    aux, _ = aux_layer_ids(cfg)
    if not aux:
        raise FormatError(f"{ckpt.path}/config.json: eagle_aux_hidden_state_layer_ids is not set",
                          hint="calibration must know which target layers feed the draft")
    if not target.is_dir():
        raise UsageError(f"--calib-target {target}: not a directory")
    tok = _tokenizer(target, ckpt.path)
    tgt = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.bfloat16).to(device).eval()
    if int(getattr(tgt.config, "hidden_size", -1)) != int(cfg.get("target_hidden_size")
                                                           or lc["hidden_size"]):
        raise FormatError(f"--calib-target {target}: hidden size {tgt.config.hidden_size} is not "
                          f"the draft's target hidden size",
                          hint="pass the target this draft was trained for")
    w = {n: ckpt.get(n).to(device) for n in ckpt.tensors if not n.endswith(("d2t", "t2d"))}
    embed = w.get("embed_tokens.weight")
    if embed is None:
        embed = tgt.get_input_embeddings().weight.detach()
    head = _Eagle3Head(w, lc, cfg, spec=spec)
    by_module = {schemes_module(t): m for m, t in names.items()}
    amax: dict[str, float] = {}

    def record(module: str, x) -> None:
        runtime = by_module.get(module)
        if runtime is not None:
            amax[runtime] = max(amax.get(runtime, 0.0), float(x.detach().abs().max()))

    def step(ids) -> None:
        out = tgt(input_ids=ids.to(device), output_hidden_states=True)
        hs = out.hidden_states
        # speculators id k = hidden_states[k] (the residual stream entering layer k)
        feats = torch.cat([hs[i][0] for i in aux], dim=-1)[:-1]
        # position t: the target's states at t and the embedding of the token at t + 1
        emb = torch.nn.functional.embedding(ids[0, 1:].to(device), embed)
        head.run(feats, emb, record)

    tokens = _run_prompts(tok, prompts, step)
    return ActivationStats(amax, spec.name, str(target), len(prompts), tokens,
                       notes=[("target forward (transformers, bf16) -> aux hidden states "
                              f"{list(aux)} -> the head's first drafting step")])


class _Eagle3Head:
    """The first drafting step of an EAGLE-3 head, written from vLLM's llama_eagle3.py /
    qwen3_eagle3.py forward (fused residual RMSNorms), recording each Linear's input."""

    def __init__(self, w: dict[str, Any], lc: dict[str, Any], cfg: dict[str, Any], *,
                 spec: methods.MethodSpec):

        self.w = w
        self.eps = float(lc.get("rms_norm_eps", 1e-6))
        self.hidden, self.heads, self.kv, self.hd = attn_dims(lc)
        self.layers = int(lc.get("num_hidden_layers", 1))
        self.qwen3 = lc.get("model_type") == "qwen3"
        self.norm_before_fc = bool(cfg.get("norm_before_fc"))
        self.fc_norm = bool(cfg.get("fc_norm"))
        # vLLM's defaults when the key is absent: True for eagle3, False for peagle (algos.py)
        self.norm_before_residual = bool(cfg.get("norm_before_residual",
                                                 spec.norm_before_residual_default))
        rope = lc.get("rope_parameters") or {}
        self.theta = float(rope.get("rope_theta", lc.get("rope_theta", 10000.0)))
        self.act = lc.get("hidden_act", "silu")

    def _norm(self, x, name: str):
        import torch

        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * self.w[name].float()).to(x.dtype)

    def _lin(self, x, name: str, record):
        record(name, x)
        return x @ self.w[f"{name}.weight"].T

    def _rope(self, x, pos):
        import torch

        half = self.hd // 2
        inv = 1.0 / (self.theta ** (torch.arange(0, half, device=x.device).float() / half))
        ang = pos.float()[:, None] * inv[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)

    def _attn(self, x, p: str, record):
        import torch

        t = x.shape[0]
        q = self._lin(x, f"{p}.self_attn.q_proj", record).view(t, self.heads, self.hd)
        k = self._lin(x, f"{p}.self_attn.k_proj", record).view(t, self.kv, self.hd)
        v = self._lin(x, f"{p}.self_attn.v_proj", record).view(t, self.kv, self.hd)
        if self.qwen3:
            q = self._norm(q, f"{p}.self_attn.q_norm.weight")
            k = self._norm(k, f"{p}.self_attn.k_norm.weight")
        pos = torch.arange(t, device=x.device)
        q, k = self._rope(q, pos), self._rope(k, pos)
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1)[None].float(), k.transpose(0, 1)[None].float(),
            v.transpose(0, 1)[None].float(), is_causal=True)
        o = o[0].transpose(0, 1).reshape(t, self.heads * self.hd).to(x.dtype)
        return self._lin(o, f"{p}.self_attn.o_proj", record)

    def _mlp(self, x, p: str, record):
        import torch

        g = self._lin(x, f"{p}.mlp.gate_proj", record)
        u = self._lin(x, f"{p}.mlp.up_proj", record)
        act = torch.nn.functional.silu if self.act == "silu" else torch.nn.functional.gelu
        return self._lin(act(g.float()).to(u.dtype) * u, f"{p}.mlp.down_proj", record)

    def run(self, feats, emb, record) -> None:
        import torch

        x = feats.to(self.w["fc.weight"].dtype)
        if self.norm_before_fc:
            x = self._norm(x, "input_norm.weight")
        if self.fc_norm:
            chunks = x.chunk(len([n for n in self.w if n.startswith("fc_norm.")]), dim=-1)
            x = torch.cat([self._norm(c, f"fc_norm.{i}.weight") for i, c in enumerate(chunks)], -1)
        h = self._lin(x, "fc", record)
        residual = None
        for i in range(self.layers):
            p = f"layers.{i}"
            if i == 0:
                e = self._norm(emb.to(h.dtype), f"{p}.input_layernorm.weight")
                if self.norm_before_residual:
                    h = self._norm(h, f"{p}.hidden_norm.weight")
                    residual = h
                else:
                    residual = h
                    h = self._norm(h, f"{p}.hidden_norm.weight")
                x = torch.cat([e, h], -1)
            else:
                residual = h + residual
                x = self._norm(residual, f"{p}.input_layernorm.weight")
            a = self._attn(x, p, record)
            residual = a + residual
            x = self._norm(residual, f"{p}.post_attention_layernorm.weight")
            h = self._mlp(x, p, record)
