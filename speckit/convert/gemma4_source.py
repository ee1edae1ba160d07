"""Reader for Gemma-4 "assistant" drafts: vLLM loads their native HF layout, so tensors are kept
as they are; what convert adds is the pairing check with the target and a clean config.
"""

from __future__ import annotations

from speckit.convert.common import META_KEYS, ReadContext, rename, source_dtype
from speckit.convert.moves import ConversionPlan
from speckit.errors import FormatError, UsageError


def read(ctx: ReadContext) -> ConversionPlan:
    src, cfg, tgt = ctx.src, ctx.src.config, ctx.tgt
    source_dtype(ctx)  # refuses mixed float dtypes
    out = ConversionPlan(method="gemma4_assistant", layout="gemma4-assistant", config={},
                         moves=[])
    backbone = cfg.get("backbone_hidden_size")
    if backbone is None:
        raise FormatError(f"{ctx.where('backbone_hidden_size')} is missing",
                          hint="a Gemma-4 assistant must say the hidden size of its target")
    if int(backbone) != tgt.hidden_size:
        raise FormatError(
            f"{src.path}: the assistant was built for a target with hidden size {backbone}, but "
            f"TARGET has {tgt.hidden_size}", hint="pair it with the Gemma-4 model it was released "
            "for (e.g. gemma-4-31B-it with gemma-4-31B-it-assistant)")
    tmt = str(tgt.model_type or "")
    ttext = str(tgt.text.get("model_type") or "")
    if not (tmt.startswith("gemma4") or ttext.startswith("gemma4")):
        raise FormatError(f"{src.path}: a Gemma-4 assistant shares the target's KV cache, but "
                          f"TARGET is {tmt or ttext or 'of unknown type'}",
                          hint="pass the Gemma-4 target it was released for")
    text = cfg.get("text_config") or {}
    if text.get("vocab_size") is not None and int(text["vocab_size"]) != tgt.vocab_size:
        raise FormatError(f"{ctx.where('text_config.vocab_size')} is {text['vocab_size']} but "
                          f"the target's vocabulary is {tgt.vocab_size}")
    pre = src.tensors.get("pre_projection.weight")
    if pre is not None and pre.shape[1] != 2 * tgt.hidden_size:
        raise FormatError(f"{src.path}: pre_projection.weight reads {pre.shape[1]} features, "
                          f"expected 2 x {tgt.hidden_size} (target embedding | target hidden)")
    config = {k: v for k, v in cfg.items() if k not in META_KEYS}
    for k in cfg:
        if k in META_KEYS:
            out.config_fields[k] = "bookkeeping, not carried (auto_map would load code)"
    out.config = config
    out.moves = [rename(src, n, n) for n in src.tensors]
    if (src.path / "generation_config.json").exists():
        out.extra_files.append("generation_config.json")  # vLLM reads suppress_tokens from it
    out.notes.append("native Gemma-4 assistant layout kept (vLLM loads it as gemma4_mtp)")
    if ctx.opts.num_speculative_tokens is not None:
        out.k, out.k_rule = ctx.opts.num_speculative_tokens, "--num-speculative-tokens"
        out.notes.append("a native assistant checkpoint records no k: pass it in "
                         "--speculative-config (the printed one includes it)")
    if ctx.opts.aux_layers is not None or ctx.opts.mask_token_id is not None:
        raise UsageError("--aux-layers and --mask-token-id do not apply to a Gemma-4 assistant")
    out.verifier = tgt.repo_id or str(tgt.path)
    return out
