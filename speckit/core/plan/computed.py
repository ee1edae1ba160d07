"""A checkpoint's tensors computed from its config.json alone: what plan counts when no
safetensors header can be read (a config file, a config folder, a cached Hub config, a registry
shape).

Pure: a config dict in, (name, safetensors dtype, shape) rows out, named as the published
checkpoints of each family name them, at the dtype torch_dtype and quantization_config give.
Families: dense Llama / Mistral / Qwen2 / Qwen3, MoE Qwen3-MoE / Mixtral / gpt-oss, MLA
DeepSeek-V2/V3 / Kimi-K2. Anything else is refused, naming the field, rather than guessed.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from speckit.core import hfconfig
from speckit.core import quant as core_quant
from speckit.core.methods import MethodSpec
from speckit.core.methods.common import layer_config
from speckit.core.tensors import DTYPE_BITS
from speckit.errors import FormatError, PlanError

Row = tuple[str, str, tuple[int, ...]]

_DTYPES = {"bfloat16": "BF16", "float16": "F16", "half": "F16", "float32": "F32",
           "float": "F32"}
# model_type -> family; the dense families' transformers config classes default
# tie_word_embeddings to false (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config)
_FAMILIES = {"llama": "dense", "mistral": "dense", "qwen2": "dense", "qwen3": "dense",
             "qwen3_moe": "moe", "mixtral": "moe", "gpt_oss": "gpt-oss",
             "deepseek_v2": "mla", "deepseek_v3": "mla", "kimi_k2": "mla"}


@dataclass(frozen=True)
class _T:
    """One tensor before its dtype is known: ``role`` "linear" (a Linear weight a quantization
    config may store packed), "float" (norms, biases, routers, embeddings, heads: the model
    dtype) or a safetensors code it is always stored in."""

    name: str
    shape: tuple[int, ...]
    role: str = "float"


@dataclass(frozen=True)
class Computed:
    """The rows, and what they were computed from (said wherever a plan uses them)."""

    tensors: list[Row]
    family: str
    model_type: str
    dtype: str  # the float tensors' safetensors code
    quantization: str  # "none" or what quantization_config makes of the Linear weights
    notes: list[str] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return sum((math.prod(s) * DTYPE_BITS[d] + 7) // 8 for _, d, s in self.tensors)

    @property
    def label(self) -> str:
        quant = "" if self.quantization == "none" else f", {self.quantization}"
        return (f"computed from config.json ({self.model_type}: {len(self.tensors):,} tensors, "
                f"{self.dtype}{quant}); no safetensors header was read")


def computed_tensors(config: Mapping[str, Any], *, where: str = "config.json") -> Computed:
    """The tensors the checkpoint of ``config`` holds. FormatError for a missing or impossible
    field, PlanError for a family or quantization speckit cannot compute."""
    cfg = dict(layer_config(dict(config)))
    _refuse_multimodal(config, where)
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    family = _FAMILIES.get(model_type)
    if family is None:
        raise PlanError(f"{where}: model_type {model_type or '(missing)'!r}: speckit cannot "
                        "compute this model's weights from its config",
                        hint="computed families: " + ", ".join(sorted(_FAMILIES))
                        + "; pass a directory holding its safetensors files (headers are enough)")
    dtype, notes = _float_dtype(config, cfg, where)
    notes += _tie_notes(cfg, config, family)
    cfg["tie_word_embeddings"] = bool(_tied(cfg, config))
    qcfg = config.get("quantization_config") or cfg.get("quantization_config")
    builder = {"dense": _dense, "moe": _moe, "gpt-oss": _gpt_oss, "mla": _mla}[family]
    raw = builder(cfg, where=where, mxfp4=_is_gpt_oss_mxfp4(qcfg, family, where))
    rows, quant = _apply_quantization(raw, qcfg, dtype, where)
    return Computed(rows, family, model_type, dtype, quant, notes)


def computed_draft_tensors(spec: MethodSpec, layout: str | None, config: Mapping[str, Any], *,
                           where: str = "draft config") -> Computed:
    """A draft's tensors from its config: the required ones its method's tensor schema lists for
    ``layout`` (the speculators layout when None), at the config's dtype. Optional and borrowed
    tensors are named in the notes, not counted: a config does not say whether they ship."""
    specs = None
    if layout is not None and spec.source_tensors is not None:
        specs = spec.source_tensors(layout, dict(config))
    if specs is None and spec.expected_tensors is not None:
        specs = spec.expected_tensors(dict(config))
    if not specs:
        raise PlanError(f"{where}: method {spec.name} has no tensor schema for layout "
                        f"{layout or 'speculators'}, so its weights cannot be computed",
                        hint="pass the draft's directory (headers are enough)")
    dtype, notes = _float_dtype(config, layer_config(dict(config)), where)
    counted = [t for t in specs if t.required and not t.borrowed]
    for t in counted:
        if any(d < 0 for d in t.shape):
            raise PlanError(f"{where}: {t.name} has a width the config does not give",
                            hint="pass the draft's directory (headers are enough)")
    left = [t.name for t in specs if not (t.required and not t.borrowed)]
    if left:
        notes.append(f"not counted: {', '.join(left)} (optional in the {layout or 'speculators'} "
                     "layout; a config does not say whether the checkpoint ships them, and vLLM "
                     "takes a missing embedding or head from the target)")
    rows = [(t.name, dtype if t.dtype == "float" else t.dtype, tuple(t.shape)) for t in counted]
    return Computed(rows, spec.name, str(layer_config(dict(config)).get("model_type") or spec.name),
                    dtype, "none", notes)


# ---- fields ------------------------------------------------------------------------------------

def _refuse_multimodal(config: Mapping[str, Any], where: str) -> None:
    for key in ("vision_config", "audio_config", "vision_tower"):
        if config.get(key):
            raise PlanError(f"{where}: config.json has a {key}: speckit computes text decoders "
                            "only, and would leave that tower's weights out",
                            hint="pass a directory holding the checkpoint's safetensors files "
                            "(headers are enough)")


def _float_dtype(config: Mapping[str, Any], cfg: Mapping[str, Any],
                 where: str) -> tuple[str, list[str]]:
    for src in (config, cfg):
        for key in ("dtype", "torch_dtype"):
            v = src.get(key)
            if v is None:
                continue
            if not isinstance(v, str) or v not in _DTYPES:
                raise FormatError(f"{where}: config.json field {key} = {v!r} is not a float "
                                  "dtype speckit knows", hint="one of " + ", ".join(_DTYPES))
            return _DTYPES[v], []
    return "BF16", ["config.json has no torch_dtype/dtype: vLLM reads that as float32 and its "
                    "'auto' dtype loads float32 checkpoints as bfloat16; computed as bfloat16"]


def _int(cfg: Mapping[str, Any], key: str, where: str) -> int:
    return hfconfig.need_int(cfg, key, where=where)


def _opt(cfg: Mapping[str, Any], key: str, where: str, default: int) -> int:
    v = hfconfig.get_int(cfg, key, where=where, default=default)
    assert v is not None
    return v


def _tied(cfg: Mapping[str, Any], config: Mapping[str, Any]) -> bool | None:
    for src in (config, cfg):
        if isinstance(src.get("tie_word_embeddings"), bool):
            return src["tie_word_embeddings"]
    return None


def _tie_notes(cfg: Mapping[str, Any], config: Mapping[str, Any], family: str) -> list[str]:
    if _tied(cfg, config) is not None:
        return []
    return [f"config.json has no tie_word_embeddings: the {family} families' transformers "
            "config classes default it to false, so lm_head is counted as its own tensor"]


# ---- families ----------------------------------------------------------------------------------

def _embed_and_head(cfg: Mapping[str, Any], where: str) -> tuple[list[_T], list[_T]]:
    hidden, vocab = _int(cfg, "hidden_size", where), _int(cfg, "vocab_size", where)
    head = [] if cfg["tie_word_embeddings"] else [_T("lm_head.weight", (vocab, hidden))]
    return ([_T("model.embed_tokens.weight", (vocab, hidden))],
            [_T("model.norm.weight", (hidden,)), *head])


def _attention(p: str, cfg: Mapping[str, Any], where: str, *, qk_norm: bool,
               bias: bool) -> list[_T]:
    a = hfconfig.attention(cfg, where=where)
    h, q, kv, hd = a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim
    out = [_T(f"{p}.self_attn.q_proj.weight", (q * hd, h), "linear"),
           _T(f"{p}.self_attn.k_proj.weight", (kv * hd, h), "linear"),
           _T(f"{p}.self_attn.v_proj.weight", (kv * hd, h), "linear"),
           _T(f"{p}.self_attn.o_proj.weight", (h, q * hd), "linear"),
           _T(f"{p}.input_layernorm.weight", (h,)),
           _T(f"{p}.post_attention_layernorm.weight", (h,))]
    if bias:
        out += [_T(f"{p}.self_attn.{n}_proj.bias", (w,))
                for n, w in (("q", q * hd), ("k", kv * hd), ("v", kv * hd))]
    if qk_norm:
        out += [_T(f"{p}.self_attn.q_norm.weight", (hd,)),
                _T(f"{p}.self_attn.k_norm.weight", (hd,))]
    return out


def _mlp(p: str, hidden: int, inter: int, *, bias: bool = False,
         names: Sequence[str] = ("gate_proj", "up_proj", "down_proj")) -> list[_T]:
    gate, up, down = names
    out = [_T(f"{p}.{gate}.weight", (inter, hidden), "linear"),
           _T(f"{p}.{up}.weight", (inter, hidden), "linear"),
           _T(f"{p}.{down}.weight", (hidden, inter), "linear")]
    if bias:
        out += [_T(f"{p}.{gate}.bias", (inter,)), _T(f"{p}.{up}.bias", (inter,)),
                _T(f"{p}.{down}.bias", (hidden,))]
    return out


def _dense(cfg: Mapping[str, Any], *, where: str, mxfp4: bool) -> list[_T]:
    mt = cfg.get("model_type")
    hidden, inter = _int(cfg, "hidden_size", where), _int(cfg, "intermediate_size", where)
    bias = bool(cfg.get("attention_bias")) or mt == "qwen2"  # Qwen2 always has q/k/v biases
    embed, tail = _embed_and_head(cfg, where)
    out = list(embed)
    for i in range(_int(cfg, "num_hidden_layers", where)):
        p = f"model.layers.{i}"
        out += _attention(p, cfg, where, qk_norm=mt == "qwen3", bias=bias)
        out += _mlp(f"{p}.mlp", hidden, inter, bias=bool(cfg.get("mlp_bias")))
    return out + tail


def _moe(cfg: Mapping[str, Any], *, where: str, mxfp4: bool) -> list[_T]:
    """Qwen3-MoE (mlp.gate + mlp.experts.E.*_proj) and Mixtral (block_sparse_moe.experts.E.w1-3)."""
    mixtral = cfg.get("model_type") == "mixtral"
    hidden, n = _int(cfg, "hidden_size", where), _int(cfg, "num_hidden_layers", where)
    experts = _int(cfg, "num_local_experts" if mixtral else "num_experts", where)
    width = _int(cfg, "intermediate_size" if mixtral else "moe_intermediate_size", where)
    step = _opt(cfg, "decoder_sparse_step", where, 1)
    dense_only = set(cfg.get("mlp_only_layers") or [])
    embed, tail = _embed_and_head(cfg, where)
    out = list(embed)
    for i in range(n):
        p = f"model.layers.{i}"
        out += _attention(p, cfg, where, qk_norm=not mixtral, bias=bool(cfg.get("attention_bias")))
        if i in dense_only or (i + 1) % step:
            out += _mlp(f"{p}.mlp", hidden, _int(cfg, "intermediate_size", where))
            continue
        moe = f"{p}.block_sparse_moe" if mixtral else f"{p}.mlp"
        out.append(_T(f"{moe}.gate.weight", (experts, hidden)))
        for e in range(experts):
            out += _mlp(f"{moe}.experts.{e}", hidden, width,
                        names=("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj",
                                                                   "down_proj"))
    return out + tail


def _gpt_oss(cfg: Mapping[str, Any], *, where: str, mxfp4: bool) -> list[_T]:
    """openai/gpt-oss: biased attention with sinks, a biased router, fused expert tensors (MXFP4
    blocks of 32 E2M1 codes in 16 bytes + one E8M0 scale each, as the published checkpoints)."""
    a = hfconfig.attention(cfg, where=where)
    h, q = a.hidden_size, a.num_heads
    experts = _int(cfg, "num_local_experts", where)
    inter = _int(cfg, "intermediate_size", where)
    embed, tail = _embed_and_head(cfg, where)
    out = list(embed)
    for i in range(_int(cfg, "num_hidden_layers", where)):
        p = f"model.layers.{i}"
        out += _attention(p, cfg, where, qk_norm=False, bias=True)
        out += [_T(f"{p}.self_attn.o_proj.bias", (h,)), _T(f"{p}.self_attn.sinks", (q,)),
                _T(f"{p}.mlp.router.weight", (experts, h)), _T(f"{p}.mlp.router.bias", (experts,))]
        out += _gpt_oss_experts(f"{p}.mlp.experts", experts, h, inter, mxfp4, where)
    return out + tail


def _gpt_oss_experts(p: str, experts: int, h: int, inter: int, mxfp4: bool,
                     where: str) -> list[_T]:
    out = [_T(f"{p}.gate_up_proj_bias", (experts, 2 * inter)),
           _T(f"{p}.down_proj_bias", (experts, h))]
    if not mxfp4:
        return out + [_T(f"{p}.gate_up_proj", (experts, h, 2 * inter)),
                      _T(f"{p}.down_proj", (experts, inter, h))]
    for width in (h, inter):
        if width % 32:
            raise FormatError(f"{where}: MXFP4 experts need widths divisible by 32 (got {width})")
    return out + [_T(f"{p}.gate_up_proj_blocks", (experts, 2 * inter, h // 32, 16), "U8"),
                  _T(f"{p}.gate_up_proj_scales", (experts, 2 * inter, h // 32), "U8"),
                  _T(f"{p}.down_proj_blocks", (experts, h, inter // 32, 16), "U8"),
                  _T(f"{p}.down_proj_scales", (experts, h, inter // 32), "U8")]


def _mla_attention(p: str, cfg: Mapping[str, Any], where: str) -> list[_T]:
    h, heads = _int(cfg, "hidden_size", where), _int(cfg, "num_attention_heads", where)
    kv_lora, rope = _int(cfg, "kv_lora_rank", where), _int(cfg, "qk_rope_head_dim", where)
    nope, v = _int(cfg, "qk_nope_head_dim", where), _int(cfg, "v_head_dim", where)
    q_lora = hfconfig.get_int(cfg, "q_lora_rank", where=where, default=None)
    a = f"{p}.self_attn"
    q = ([_T(f"{a}.q_a_proj.weight", (q_lora, h), "linear"),
          _T(f"{a}.q_a_layernorm.weight", (q_lora,)),
          _T(f"{a}.q_b_proj.weight", (heads * (nope + rope), q_lora), "linear")] if q_lora
         else [_T(f"{a}.q_proj.weight", (heads * (nope + rope), h), "linear")])
    return q + [_T(f"{a}.kv_a_proj_with_mqa.weight", (kv_lora + rope, h), "linear"),
                _T(f"{a}.kv_a_layernorm.weight", (kv_lora,)),
                _T(f"{a}.kv_b_proj.weight", (heads * (nope + v), kv_lora), "linear"),
                _T(f"{a}.o_proj.weight", (h, heads * v), "linear"),
                _T(f"{p}.input_layernorm.weight", (h,)),
                _T(f"{p}.post_attention_layernorm.weight", (h,))]


def _mla_mlp(p: str, i: int, cfg: Mapping[str, Any], where: str) -> list[_T]:
    h = _int(cfg, "hidden_size", where)
    if i < _opt(cfg, "first_k_dense_replace", where, 0):
        return _mlp(f"{p}.mlp", h, _int(cfg, "intermediate_size", where))
    experts, width = _int(cfg, "n_routed_experts", where), _int(cfg, "moe_intermediate_size",
                                                                  where)
    out = [_T(f"{p}.mlp.gate.weight", (experts, h))]
    # DeepSeek-V3 / Kimi-K2 route with a score-correction bias; DeepSeek-V2 only with noaux_tc
    if cfg.get("model_type") != "deepseek_v2" or cfg.get("topk_method") == "noaux_tc":
        out.append(_T(f"{p}.mlp.gate.e_score_correction_bias", (experts,), "F32"))
    shared = _opt(cfg, "n_shared_experts", where, 0)
    if shared:
        out += _mlp(f"{p}.mlp.shared_experts", h, width * shared)
    for e in range(experts):
        out += _mlp(f"{p}.mlp.experts.{e}", h, width)
    return out


def _mla(cfg: Mapping[str, Any], *, where: str, mxfp4: bool) -> list[_T]:
    """DeepSeek-V2/V3 and Kimi-K2: MLA attention, leading dense layers, routed + shared experts,
    and num_nextn_predict_layers MTP layers after the last one (as the published checkpoints)."""
    h, v = _int(cfg, "hidden_size", where), _int(cfg, "vocab_size", where)
    n = _int(cfg, "num_hidden_layers", where)
    embed, tail = _embed_and_head(cfg, where)
    out = list(embed)
    for i in range(n + _opt(cfg, "num_nextn_predict_layers", where, 0)):
        p = f"model.layers.{i}"
        out += _mla_attention(p, cfg, where) + _mla_mlp(p, i, cfg, where)
        if i >= n:  # an MTP module: its own embedding, two norms, the projection, a head
            out += [_T(f"{p}.embed_tokens.weight", (v, h)), _T(f"{p}.enorm.weight", (h,)),
                    _T(f"{p}.hnorm.weight", (h,)), _T(f"{p}.eh_proj.weight", (h, 2 * h)),
                    _T(f"{p}.shared_head.norm.weight", (h,)),
                    _T(f"{p}.shared_head.head.weight", (v, h))]
    return out + tail


# ---- quantization ------------------------------------------------------------------------------

def _is_gpt_oss_mxfp4(qcfg: Any, family: str, where: str) -> bool:
    method = str(qcfg.get("quant_method", "")).lower() if isinstance(qcfg, dict) else ""
    if method == "mxfp4" and family != "gpt-oss":
        raise PlanError(f"{where}: quantization_config quant_method 'mxfp4' is computed for "
                        "gpt-oss only", hint="pass a directory holding the safetensors files")
    return method == "mxfp4"


def _not_converted(qcfg: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key in core_quant.EXCLUDE_KEYS:
        v = qcfg.get(key)
        if isinstance(v, list):
            out += [str(x) for x in v]
    return out


def _excluded(module: str, patterns: Sequence[str]) -> bool:
    """fnmatch wildcards (Quark, ModelOpt, HF), `re:` regexes (compressed-tensors), or a module
    name / prefix."""
    for pat in patterns:
        if pat.startswith("re:"):
            if re.match(pat[3:], module):
                return True
        elif fnmatch.fnmatchcase(module, pat) or module == pat or module.startswith(pat + "."):
            return True
    return False


def _apply_quantization(raw: list[_T], qcfg: Any, dtype: str,
                        where: str) -> tuple[list[Row], str]:
    if not qcfg:
        return [_row(t, dtype) for t in raw], "none"
    if not isinstance(qcfg, dict):
        raise FormatError(f"{where}: quantization_config must be an object")
    method = str(qcfg.get("quant_method", "")).lower()
    skip = _not_converted(qcfg)
    if method == "mxfp4":  # gpt-oss: the builder already wrote the experts' blocks and scales
        return [_row(t, dtype) for t in raw], "MXFP4 experts (quant_method mxfp4)"
    scheme = core_quant.recognise(qcfg)
    if scheme is not None:
        rows: list[Row] = []
        for t in raw:
            if t.role == "linear" and not _excluded(t.name.removesuffix(".weight"), skip):
                rows += scheme.outputs(t.name, t.shape, dtype)
            else:
                rows.append(_row(t, dtype))
        return rows, f"{scheme.name} ({scheme.layout}) Linear weights"
    if method in ("fp8", "fbgemm_fp8") and qcfg.get("weight_block_size"):
        return _fp8_block(raw, qcfg, dtype, skip, where)
    raise PlanError(f"{where}: quantization_config quant_method {method or '(missing)'!r}: "
                    "speckit cannot compute this checkpoint's weight bytes from its config",
                    hint="computed: FP8 with weight_block_size, gpt-oss MXFP4 and the schemes "
                    "speckit quantize writes; pass a directory holding the safetensors files")


def _fp8_block(raw: list[_T], qcfg: Mapping[str, Any], dtype: str, skip: Sequence[str],
               where: str) -> tuple[list[Row], str]:
    """FP8 E4M3 Linear weights with one F32 weight_scale_inv per block (DeepSeek-V3's layout)."""
    block = qcfg.get("weight_block_size")
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise FormatError(f"{where}: quantization_config.weight_block_size must be two positive "
                          f"integers (got {block!r})")
    bo, bi = block
    rows: list[Row] = []
    for t in raw:
        if t.role != "linear" or _excluded(t.name.removesuffix(".weight"), skip):
            rows.append(_row(t, dtype))
            continue
        o, i = t.shape
        rows += [(t.name, "F8_E4M3", t.shape),
                 (t.name + "_scale_inv", "F32", (-(-o // bo), -(-i // bi)))]
    return rows, f"FP8 E4M3 Linear weights, {bo}x{bi} block scales"


def _row(t: _T, dtype: str) -> Row:
    return (t.name, dtype if t.role in ("float", "linear") else t.role, t.shape)


__all__ = ["Computed", "Row", "computed_draft_tensors", "computed_tensors"]
