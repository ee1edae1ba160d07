"""Weight bytes per TP rank from safetensors header entries, as vLLM 0.32 allocates them.

Pure: a HeaderTensor carries its dtype's bit width (filled by the io layer), so no file is read.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speckit.core import quant as core_quant
from speckit.core.plan.dims import text_config
from speckit.errors import UsageError

VOCAB_PADDING = 64  # model_executor/layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
DRAFT_QUANTS = ("bf16", *core_quant.SCHEMES)
_MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2, "half": 2, "float": 2}
_EMBED_KEYS = ("embed_tokens", "lm_head", "wte.", "word_embeddings", "embed_out",
               "shared_head.head")
# linears vLLM builds as ReplicatedLinear / plain nn.Linear (not split by TP)
_REPLICATED_KEYS = ("q_a_proj", "kv_a_proj_with_mqa", "mlp.gate.weight", ".router.", "eh_proj",
                    "e_score_correction_bias")
_REPLICATED_NAMES = ("fc.weight", "model.fc.weight")  # EAGLE-3 / DFlash aux-state projection
_NEVER_LOADED = ("t2d",)  # vLLM skips it (llama_eagle3.py / qwen3_dflash.py load_weights)
_QUANTIZED_CODES = ("F8_E4M3", "F8_E5M2", "U8")


@dataclass(frozen=True)
class HeaderTensor:
    """One safetensors header entry: name, dtype code, shape, and that dtype's facts."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    bits: int  # bits per element of ``dtype``
    is_float: bool  # a float dtype vLLM casts to the model dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.numel * self.bits + 7) // 8


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def is_embed(name: str) -> bool:
    return any(k in name for k in _EMBED_KEYS)


def is_top_level(name: str, key: str) -> bool:
    """``name`` is the model's own ``key`` weight (embed_tokens/lm_head), not a layer's."""
    return name == f"{key}.weight" or name.endswith(f".{key}.weight") and "layers." not in name


def model_dtype(config: Mapping[str, Any], tensors: Sequence[HeaderTensor]) -> tuple[str, int]:
    """vLLM's 'auto' dtype: the config's, with float32 downcast to bfloat16."""
    for src in (config, text_config(config)):
        for key in ("dtype", "torch_dtype"):
            v = src.get(key)
            if isinstance(v, str) and v in _MODEL_DTYPE_BYTES:
                return ("bfloat16" if v in ("float32", "float") else v), _MODEL_DTYPE_BYTES[v]
    by: dict[str, int] = {}
    for t in tensors:
        if t.is_float:
            by[t.dtype] = by.get(t.dtype, 0) + t.nbytes
    code = max(by, key=by.get) if by else "BF16"
    return {"F16": "float16"}.get(code, "bfloat16"), 2


def rank_numel(t: HeaderTensor, *, tp: int, kv_heads: int | None) -> int:
    """Elements of tensor ``t`` one TP rank holds in vLLM (memoised: a "try" re-plans the same
    tensors, and an MoE checkpoint has a hundred thousand of them)."""
    return _rank_numel(t, tp, kv_heads)


@functools.lru_cache(maxsize=1 << 19)
def _rank_numel(t: HeaderTensor, tp: int, kv_heads: int | None) -> int:
    shape = t.shape
    if not shape:
        return 1
    if is_embed(t.name) and len(shape) == 2:
        rows = _cdiv(shape[0], VOCAB_PADDING) * VOCAB_PADDING  # vocab-parallel, padded
        return rows // tp * shape[1]
    if tp == 1 or len(shape) == 1 or any(k in t.name for k in _REPLICATED_KEYS) \
            or t.name in _REPLICATED_NAMES:
        return t.numel
    if kv_heads and kv_heads < tp and (".k_proj." in t.name or ".v_proj." in t.name):
        return t.numel // kv_heads  # one KV head per rank, replicated
    return _cdiv(shape[0], tp) * math.prod(shape[1:])


def _loaded_bytes(t: HeaderTensor, numel: int, model_bytes: int) -> int:
    # vLLM allocates float parameters in the model dtype; quantized codes and scales keep theirs
    if t.is_float and "scale" not in t.name:
        return numel * model_bytes
    return (numel * t.bits + 7) // 8


def _is_linear_weight(t: HeaderTensor) -> bool:
    return (len(t.shape) >= 2 and t.name.endswith("weight") and t.is_float
            and not is_embed(t.name) and "norm" not in t.name)


def _quant_bytes(numel: int, in_f: int, scheme: str, model_bytes: int) -> int:
    """Bytes of one rank's share of a linear weight as `speckit quantize` stores it: the codes and
    every scale tensor of the scheme's core entry (e.g. FP8: a per-channel F32 scale per row)."""
    sch = core_quant.get(scheme)
    if in_f <= 0 or in_f % sch.in_features_multiple:
        return numel * model_bytes  # quantize keeps such a layer in the model dtype
    model_dtype = "BF16" if model_bytes == 2 else "F32"
    return sch.weight_bytes((numel // in_f, in_f), model_dtype)


def rank_bytes(tensors: Sequence[HeaderTensor], *, tp: int, kv_heads: int | None,
               model_bytes: int, skip: set[str] | frozenset[str] = frozenset(),
               quant: str | None = None) -> tuple[int, int]:
    """(loaded-or-priced bytes, stored-dtype bytes) per rank."""
    total = stored = 0
    for t in tensors:
        if t.name in skip or t.name.rsplit(".", 1)[-1] in _NEVER_LOADED or t.name in _NEVER_LOADED:
            continue
        n = rank_numel(t, tp=tp, kv_heads=kv_heads)
        stored += (n * t.bits + 7) // 8
        if quant and quant != "bf16" and _is_linear_weight(t) \
                and core_quant.get(quant).recipe_keep(t.name) is None:
            # a Linear the scheme's recipe keeps (fc under Quark) is priced as stored
            total += _quant_bytes(n, t.shape[-1], quant, model_bytes)
        else:
            total += _loaded_bytes(t, n, model_bytes)
    return total, stored


@dataclass(frozen=True)
class DraftWeightsInput:
    """What the draft's weight count needs: its tensors and what is known to be shared."""

    tensors: Sequence[HeaderTensor]
    target_tensors: Sequence[HeaderTensor]
    shares: Mapping[str, bool]  # draft tensor name -> bit-identical to the target's
    kv_heads: int | None
    borrows_embeddings: bool  # vLLM takes a missing embed_tokens/lm_head from the target


def _borrowed_and_notes(d: DraftWeightsInput, skip: set[str]) -> tuple[list[str], list[str]]:
    names = {t.name for t in d.tensors}
    borrowed = sorted(skip)
    for key in ("embed_tokens", "lm_head"):
        if d.borrows_embeddings and not any(is_top_level(n, key) for n in names):
            borrowed.append(f"{key} (not in the draft; vLLM uses the target's)")
    target_shapes = {t.shape for t in d.target_tensors if is_embed(t.name)}
    notes = [f"draft ships {t.name}; counted as its own (vLLM shares it only when it is "
             f"bit-identical to the target's; speckit checks that for local pairs)"
             for t in d.tensors
             if t.name not in skip and t.shape in target_shapes and t.name not in d.shares
             and any(is_top_level(t.name, key) for key in ("embed_tokens", "lm_head"))]
    return borrowed, notes


@dataclass(frozen=True)
class DraftWeights:
    bytes: int  # per rank, as loaded or as priced with --draft-quant
    stored_bytes: int  # per rank at the checkpoint's stored dtypes
    borrowed: list[str]
    quant_saving_bytes: int
    notes: list[str]


def draft_weights(d: DraftWeightsInput, *, tp: int, target_tp: int, model_bytes: int,
                  quant: str | None) -> DraftWeights:
    """The draft's bytes per rank (as stored or priced with ``quant``), what it borrows, notes."""
    names = {t.name for t in d.tensors}
    skip = {n for n, same in d.shares.items() if same and n in names}
    borrowed, notes = _borrowed_and_notes(d, skip)
    already = [t for t in d.tensors if t.dtype in _QUANTIZED_CODES and t.name.endswith("weight")]
    if quant and quant != "bf16" and already:
        raise UsageError(f"--draft-quant {quant}: the draft is already quantized "
                         f"({already[0].name} is {already[0].dtype})",
                         hint="drop --draft-quant; quantized drafts are counted as stored")
    priced, stored = rank_bytes(d.tensors, tp=tp, kv_heads=d.kv_heads, model_bytes=model_bytes,
                                skip=skip, quant=quant)
    base, _ = rank_bytes(d.tensors, tp=tp, kv_heads=d.kv_heads, model_bytes=model_bytes,
                         skip=skip)
    if tp == 1 and target_tp > 1:
        notes.append("draft_tensor_parallel_size=1: every rank holds a full draft replica")
    return DraftWeights(priced, stored, borrowed, base - priced, notes)
