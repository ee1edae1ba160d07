"""EAGLE-3: a one-or-more-layer head over three (or A) target hidden states, drafting sequentially.

speculators layout (`speculators_model_type: eagle3`) is what vLLM loads; see
docs/formats.md#eagle3.
"""

from __future__ import annotations

from typing import Any

from speckit.core import hfconfig
from speckit.core.methods import AssumedShape, KVLayer, Problem, TensorSpec, spec_from
from speckit.core.methods.common import (
    attn_dims,
    aux_fields,
    aux_layer_ids,
    base_dims,
    decoder_layer_specs,
    draft_layer_kv,
    first,
    is_decoder_linear,
    layer_config,
    missing_fields,
    need,
    offset_layer_runtime_name,
    pairing_problems,
    vocab_head_specs,
)
from speckit.core.methods.layout import (
    MLA_TENSORS,
    Found,
    LayoutSpec,
    any_prefix,
    any_suffix,
    architectures,
)
from speckit.errors import FormatError


def draft_kv_layers(config: dict[str, Any]) -> list[KVLayer]:
    return draft_layer_kv(config, int(layer_config(config).get("num_hidden_layers", 1)))


def runtime_module_name(ckpt_name: str, *, target_num_layers: int) -> str:
    """vLLM's run-time module name for a checkpoint tensor (Quark `exclude` must use it)."""
    return offset_layer_runtime_name(ckpt_name, target_num_layers=target_num_layers)


# ---- structure, description and pairing checks ------------------------------------------------

LAYER_TYPES = ("llama", "qwen3")  # the only decoder layers vLLM builds EAGLE-3 drafts with
# SafeAILab, SpecForge and TorchSpec heads read three target layers (low, mid, high) when the
# config records no ids; DeepSpec's record five (top-level target_layer_ids)
SOURCE_NUM_AUX = 3


def describe(config: dict[str, Any]) -> dict[str, Any]:
    """Dims and flags of an EAGLE-3 draft (speculators layout or a flat SafeAILab/SpecForge one)."""
    d = base_dims(config)
    aux = aux_fields(config)
    ids = aux["aux_layer_ids"]
    d.update(
        **aux,
        num_aux=len(ids) if ids else SOURCE_NUM_AUX,
        block_size=None, mask_token_id=config.get("mask_token_id"),
        norm_before_residual=config.get("norm_before_residual"),
        norm_before_fc=bool(config.get("norm_before_fc")),
        fc_norm=bool(config.get("fc_norm")),
        norm_output=config.get("norm_output"),
    )
    return d


def head_dims(config: dict[str, Any]) -> tuple[dict[str, Any], int, int, int, int, int]:
    """(layer config, hidden, vocab, draft vocab, aux count, target hidden) of an EAGLE head."""
    cfg = layer_config(config)
    hidden = attn_dims(cfg, where="transformer_layer_config")[0]
    vocab = int(need(cfg, "vocab_size", where="transformer_layer_config"))
    draft_vocab = int(first(config.get("draft_vocab_size"), vocab))
    ids, _ = aux_layer_ids(config)
    num_aux = len(ids) if ids else SOURCE_NUM_AUX
    target_hidden = int(first(config.get("target_hidden_size"), hidden))
    return cfg, hidden, vocab, draft_vocab, num_aux, target_hidden


def body_specs(config: dict[str, Any], *, first_layer: str = "layers.0") -> list[TensorSpec]:
    """fc (+ its optional norms), the decoder layers and the final norm of an EAGLE-3 head.

    Layer 0 reads [embeds | fc(hidden)] (2H wide) and has hidden_norm; later layers are standard.
    """
    cfg, hidden, _, _, num_aux, target_hidden = head_dims(config)
    qk_norm = cfg.get("model_type") == "qwen3"
    specs = [TensorSpec("fc.weight", (hidden, num_aux * target_hidden))]
    if config.get("norm_before_fc"):
        specs.append(TensorSpec("input_norm.weight", (num_aux * target_hidden,)))
    if config.get("fc_norm"):
        specs += [TensorSpec(f"fc_norm.{i}.weight", (target_hidden,)) for i in range(num_aux)]
    specs += decoder_layer_specs(first_layer, cfg, in_features=2 * hidden, qk_norm=qk_norm,
                                 hidden_norm=True)
    for i in range(1, int(cfg.get("num_hidden_layers") or 1)):
        specs += decoder_layer_specs(f"layers.{i}", cfg, qk_norm=qk_norm)
    specs.append(TensorSpec("norm.weight", (hidden,)))
    return specs


def expected_tensors(config: dict[str, Any]) -> list[TensorSpec]:
    """Tensors of a speculators-format EAGLE-3 draft (docs/formats.md#eagle3-speculators)."""
    _, hidden, vocab, draft_vocab, _, _ = head_dims(config)
    return [TensorSpec("embed_tokens.weight", (vocab, hidden), required=False, borrowed=True),
            *body_specs(config), *vocab_head_specs(vocab, draft_vocab, hidden)]


def source_tensors(layout: str, config: dict[str, Any], *,
                   present: frozenset[str] = frozenset()) -> list[TensorSpec] | None:
    """Tensors of a published EAGLE-3 layout (docs/formats.md#eagle3); None if unknown."""
    if layout == "speculators":
        return expected_tensors(config)
    if layout in ("safeailab-eagle3", "specforge-eagle3"):
        return trained_source_specs(config, first_layer="midlayer")
    _, hidden, vocab, draft_vocab, _, _ = head_dims(config)
    embed = TensorSpec("embed_tokens.weight", (vocab, hidden), required=False, borrowed=True)
    if layout == "deepspec-eagle3":  # Qwen3Eagle3Model.save_pretrained: full vocab, no maps
        return [embed, *body_specs(config), TensorSpec("lm_head.weight", (vocab, hidden))]
    maps = [TensorSpec("d2t", (draft_vocab,), dtype="I64", required=False),
            TensorSpec("t2d", (vocab,), dtype="BOOL", required=False)]
    head = [TensorSpec("lm_head.weight", (draft_vocab, hidden)), *maps]
    if layout == "torchspec-eagle3":  # d2t/t2d only for a reduced vocab (TorchSpec buffers)
        return [embed, *body_specs(config), *head]
    if layout == "eagle3-mla":
        return [embed, *mla_body_specs(config), *head]
    return None


def mla_body_specs(config: dict[str, Any]) -> list[TensorSpec]:
    """fc, one MLA decoder layer reading [embeds | hidden] (2H) and the final norm: TorchSpec's
    Eagle3DeepseekV2ForCausalLM as vLLM's deepseek_eagle3.py loads it (names layers.0.*)."""
    cfg = layer_config(config)
    hidden = int(need(cfg, "hidden_size"))
    heads = int(need(cfg, "num_attention_heads"))
    kv_rank, rope = int(need(cfg, "kv_lora_rank")), int(need(cfg, "qk_rope_head_dim"))
    nope, v = int(need(cfg, "qk_nope_head_dim")), int(need(cfg, "v_head_dim"))
    inter = int(need(cfg, "intermediate_size"))
    _, _, _, _, num_aux, target_hidden = head_dims(config)
    a, fin = "layers.0.self_attn.", 2 * hidden
    q_rank = cfg.get("q_lora_rank")
    q = [TensorSpec(a + "q_proj.weight", (heads * (nope + rope), fin))] if not q_rank else [
        TensorSpec(a + "q_a_proj.weight", (int(q_rank), fin)),
        TensorSpec(a + "q_a_layernorm.weight", (int(q_rank),)),
        TensorSpec(a + "q_b_proj.weight", (heads * (nope + rope), int(q_rank)))]
    return [TensorSpec("fc.weight", (hidden, num_aux * target_hidden)), *q,
            TensorSpec(a + "kv_a_proj_with_mqa.weight", (kv_rank + rope, fin)),
            TensorSpec(a + "kv_a_layernorm.weight", (kv_rank,)),
            TensorSpec(a + "kv_b_proj.weight", (heads * (nope + v), kv_rank)),
            TensorSpec(a + "o_proj.weight", (hidden, heads * v)),
            *[TensorSpec(f"layers.0.{n}.weight", (hidden,)) for n in
              ("hidden_norm", "input_layernorm", "post_attention_layernorm")],
            TensorSpec("layers.0.mlp.gate_proj.weight", (inter, hidden)),
            TensorSpec("layers.0.mlp.up_proj.weight", (inter, hidden)),
            TensorSpec("layers.0.mlp.down_proj.weight", (hidden, inter)),
            TensorSpec("norm.weight", (hidden,))]


def trained_source_specs(config: dict[str, Any], *, first_layer: str,
                         extra: tuple[TensorSpec, ...] = ()) -> list[TensorSpec]:
    """A trainer's export: its own head and, always, the d2t/t2d buffers (even for a full
    vocab, where they are identity maps a conversion drops)."""
    _, hidden, vocab, draft_vocab, _, _ = head_dims(config)
    return [TensorSpec("embed_tokens.weight", (vocab, hidden), required=False, borrowed=True),
            *body_specs(config, first_layer=first_layer), *extra,
            TensorSpec("lm_head.weight", (draft_vocab, hidden)),
            TensorSpec("d2t", (draft_vocab,), dtype="I64"),
            TensorSpec("t2d", (vocab,), dtype="BOOL")]


def check_config(config: dict[str, Any], *,
                 target_config: dict[str, Any] | None = None) -> list[Problem]:
    """Config-level problems of an EAGLE-3 draft, and of its pairing with ``target_config``."""
    d = describe(config)
    out = head_checks(config, d)
    if "speculators_model_type" in config and config.get("norm_before_residual") is None:
        out.append(Problem("warning", "norm-before-residual-unset",
                           "norm_before_residual is not set: vLLM assumes true for EAGLE-3 while "
                           "speculators trains with false; write the value the draft used",
                           "norm_before_residual"))
    out += pairing_problems(d, target_config=target_config, aux_required=False)
    return out


def head_checks(config: dict[str, Any], d: dict[str, Any]) -> list[Problem]:
    """Checks shared with P-EAGLE: dims, decoder type, norm flags, vocab sizes, Llama's fc."""
    out = missing_fields(d, {"hidden": "hidden_size", "heads": "num_attention_heads",
                             "intermediate": "intermediate_size", "target_vocab": "vocab_size"})
    mt = d.get("model_type")
    if mt is not None and mt not in LAYER_TYPES and not is_mla(config):
        out.append(Problem("error", "unsupported-layer-type",
                           f"decoder model_type {mt!r}: vLLM builds EAGLE-3 heads only from "
                           f"{' or '.join(LAYER_TYPES)} layers",
                           "transformer_layer_config.model_type"))
    if config.get("fc_norm") and config.get("norm_before_fc"):
        out.append(Problem("error", "conflicting-flags", "fc_norm and norm_before_fc are both "
                           "true; they are mutually exclusive", "fc_norm"))
    built = llama_fc_aux_count(config) if mt == "llama" else None
    if built is not None and d.get("num_aux") != built:
        out.append(Problem("error", "llama-aux-count",
                           f"a Llama-layer EAGLE-3 head over {d.get('num_aux')} aux layers, but "
                           f"vLLM's Eagle3LlamaForCausalLM sizes fc for {built} (it reads "
                           "num_aux_hidden_states from the layer config, else 3) and fails to "
                           "load; set num_aux_hidden_states to the aux layer count",
                           "num_aux_hidden_states"))
    v, vd = d.get("target_vocab"), d.get("draft_vocab")
    if v is not None and vd is not None and int(vd) > int(v):
        out.append(Problem("error", "draft-vocab-too-large", f"draft_vocab_size {vd} exceeds "
                           f"the vocab size {v}", "draft_vocab_size"))
    return out


def is_mla(config: dict[str, Any]) -> bool:
    """A Multi-Latent-Attention head (kv_lora_rank set): vLLM builds it with deepseek_eagle3.py,
    not from llama/qwen3 layers."""
    return layer_config(config).get("kv_lora_rank") is not None


def llama_fc_aux_count(config: dict[str, Any]) -> int:
    """How many aux states vLLM's Llama EAGLE-3 head sizes ``fc`` for: ``num_aux_hidden_states``
    of the config it builds from (a speculators draft's transformer_layer_config), else the ids
    of ``eagle_config``, else 3. Qwen3 heads also count the top-level ids."""
    n = hfconfig.get_int(layer_config(config), "num_aux_hidden_states")
    if n is not None:
        return n
    ids = hfconfig.get_ints(config.get("eagle_config") or {}, "eagle_aux_hidden_state_layer_ids",
                            where="config.json: eagle_config")
    return len(ids) if ids else SOURCE_NUM_AUX


def quantizable(name: str, config: dict[str, Any]) -> bool:
    """Linear weights vLLM builds with the draft's quant config: fc and the decoder projections
    (lm_head is a ParallelLMHead, embed_tokens a VocabParallelEmbedding: never quantized)."""

    return is_decoder_linear(name, extra=("fc.weight",))


def runtime_module_aliases(ckpt_name: str, *, target_num_layers: int,
                           config: dict[str, Any]) -> list[str]:
    """Other run-time names of the same module: vLLM's Qwen3 EAGLE-3 layer re-creates qkv_proj
    with prefix `model.layers.N.qkv_proj` (no `self_attn.`), qwen3_eagle3.py."""
    name = runtime_module_name(ckpt_name, target_num_layers=target_num_layers)
    if layer_config(config).get("model_type") == "qwen3" and name.endswith(".self_attn.qkv_proj"):
        return [name.replace(".self_attn.qkv_proj", ".qkv_proj")]
    return []


def recognise_family(cfg: dict[str, Any], names: frozenset[str]) -> Found | None:
    """The EAGLE-3 family's layouts (eagle3 and peagle modules declare them): a P-EAGLE head
    first, then the EAGLE-3 exports by their first layer's name and architecture."""
    archs = architectures(cfg)
    if "fc.weight" not in names:
        return None
    if any("PEagle" in a for a in archs) or ("mask_hidden" in names
                                             and any_prefix(names, "layers.0.")):
        return "specforge-peagle", "peagle", [f"architectures = {archs}", "tensor mask_hidden"
                                              if "mask_hidden" in names else "no mask_hidden"]
    mid = any_prefix(names, "midlayer.")
    # layer 0 of an EAGLE-3 head reads [embeds | hidden]: hidden_norm marks it when it is not
    # named midlayer (DeepSpec, TorchSpec's vLLM export)
    first = mid or ("layers.0.hidden_norm.weight" if "layers.0.hidden_norm.weight" in names
                    else None)
    if first is None:
        return None
    ev = [f"architectures = {archs}", f"tensor {first}"]
    mla = any_suffix(names, *MLA_TENSORS)
    if mla or any(a.startswith(("Eagle3DeepseekV2", "Eagle3DeepseekV3")) for a in archs):
        return "eagle3-mla", "eagle3", [*ev, f"tensor {mla}" if mla else "an MLA architecture"]
    if mid is None:
        if "Qwen3Eagle3Model" in archs or cfg.get("target_layer_ids") is not None:
            return "deepspec-eagle3", "eagle3", [
                *ev, f"top-level target_layer_ids = {cfg.get('target_layer_ids')}"]
        return "torchspec-eagle3", "eagle3", [*ev, "no midlayer.* (renamed layers.0.*)"]
    if any("Eagle3" in a for a in archs):
        return "specforge-eagle3", "eagle3", ev
    if "d2t" in names:
        ev.append("tensors d2t/t2d")
    return "safeailab-eagle3", "eagle3", ev


# the layouts this method comes in (detect.py tries them by priority; docs/formats.md
# has a section on each)
LAYOUT_SPECS: tuple[LayoutSpec, ...] = (
    LayoutSpec(
        "eagle3-mla", "eagle3",
        "EAGLE-3 head with Multi-Latent Attention (Eagle3DeepseekV2ForCausalLM: "
        "q_a_proj/kv_a_proj_with_mqa/kv_b_proj); vLLM loads it as published",
        recognise_family, priority=510, as_published=(
            "an EAGLE-3 head with Multi-Latent Attention: vLLM 0.32 loads it as published "
            "(Eagle3DeepseekV2ForCausalLM, deepseek_eagle3.py, layers.0.* names) and the "
            "speculators layout has no MLA head, so speckit does not rewrite it",
            "serve the checkpoint as it is with method 'eagle3'; a midlayer.* export (TorchSpec "
            "without --vllm) must be re-exported with TorchSpec's convert_to_hf.py --vllm")),
    LayoutSpec(
        "deepspec-eagle3", "eagle3",
        "DeepSpec EAGLE-3 (Qwen3Eagle3Model: layers.0.*, top-level target_layer_ids, "
        "output-of-layer ids)",
        recognise_family, priority=520, reader="eagle3_sources"),
    LayoutSpec(
        "torchspec-eagle3", "eagle3",
        "TorchSpec vLLM export of an EAGLE-3 head (convert_to_hf.py --vllm: layers.0.*, "
        "eagle_config ids)",
        recognise_family, priority=530, reader="eagle3_sources"),
    LayoutSpec(
        "specforge-eagle3", "eagle3",
        "SpecForge EAGLE-3 export (LlamaForCausalLMEagle3: midlayer.*)",
        recognise_family, priority=540, reader="eagle3_sources"),
    LayoutSpec(
        "safeailab-eagle3", "eagle3",
        "SafeAILab EAGLE-3 (traineagle3: midlayer.*, d2t/t2d, usually a pickle)",
        recognise_family, priority=550, reader="eagle3_sources"),
)


# ---- a stand-in shape where the draft's config is not recorded ---------------------------------

# The documented EAGLE-3 construction: one decoder layer (arXiv 2503.01840) with the target's
# attention widths and, for a dense target, its MLP width: SpecForge's published head configs
# (sgl-project/SpecForge configs/llama3-8B-eagle3.json: "intermediate_size": 14336, Llama-3.1-8B's;
# configs/qwen3-4b-eagle3.json: 9728, Qwen3-4B's; both "num_hidden_layers": 1). A MoE target's
# expert width is not the head's: for gpt-oss SpecForge's head is a dense MLP of 6 x hidden
# (configs/gpt-oss-20B-eagle3.json @ ca803a5: "hidden_size": 2880, "intermediate_size": 17280).
# No other MoE family has a documented head width here: no stand-in for them.
HEAD_MLP_PER_HIDDEN = {"gpt_oss": 6}
_SPECFORGE = "https://github.com/sgl-project/SpecForge/blob/ca803a5b736f2b65e027f1c9d1ed232beaacc508"
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def _head_mlp(tcfg: dict[str, Any]) -> tuple[int, str] | None:
    """(MLP width, where it comes from) of an EAGLE-3 head for this target; None: undocumented
    (a MoE family other than gpt-oss)."""
    mtype = str(tcfg.get("model_type") or "")
    if mtype in HEAD_MLP_PER_HIDDEN:
        n = HEAD_MLP_PER_HIDDEN[mtype]
        return (n * int(tcfg["hidden_size"]),
                f"a dense MLP of {n} x hidden as SpecForge's {mtype} EAGLE-3 head "
                f"({_SPECFORGE}/configs/gpt-oss-20B-eagle3.json: intermediate_size 17280), not "
                "the target's expert width")
    if any(tcfg.get(k) for k in _MOE_KEYS):
        return None
    inter = tcfg.get("intermediate_size")
    if not inter:
        return None
    return int(inter), ("the target's MLP width, as SpecForge's EAGLE-3 head configs take it "
                        f"({_SPECFORGE}/configs/llama3-8B-eagle3.json)")


def head_shape(target_config: dict[str, Any], *, layers: int, method: str,
               layers_said: str) -> AssumedShape | str:
    """A speculators-layout config of an EAGLE-3-family head of ``layers`` decoder layers for
    ``target_config`` (see the comment above); the draft vocabulary is the target's, the larger
    lm_head, so the draft's cost is an upper bound. A sentence saying why not where the
    construction is undocumented for this target."""
    tcfg = layer_config(target_config)
    try:
        hidden, heads, kv, hd = attn_dims(tcfg, where="target config")
        vocab = int(tcfg["vocab_size"])
    except (KeyError, TypeError, ValueError, FormatError):
        return "the target's recorded shape lacks its attention widths or vocabulary"
    mlp = _head_mlp(tcfg)
    if mlp is None:
        return (f"no documented EAGLE-3 head MLP width for a {tcfg.get('model_type')} MoE target "
                "(the expert width is not the head's)")
    mtype = tcfg.get("model_type") if tcfg.get("model_type") in LAYER_TYPES else "llama"
    inner = {"model_type": mtype, "hidden_size": hidden, "num_attention_heads": heads,
             "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": mlp[0],
             "num_hidden_layers": layers, "vocab_size": vocab, "hidden_act": "silu",
             "rms_norm_eps": 1e-5, "max_position_embeddings": 4096}
    config = {"speculators_model_type": method, "transformer_layer_config": inner,
              "draft_vocab_size": vocab, "target_hidden_size": hidden,
              "torch_dtype": str(target_config.get("torch_dtype") or "bfloat16")}
    said = (f"{layers} decoder layer{'s' if layers != 1 else ''} ({layers_said}) with the "
            f"target's attention widths (hidden {hidden}, {heads} heads, {kv} KV heads, head_dim "
            f"{hd}), MLP {mlp[0]} ({mlp[1]}), draft vocabulary = the target's {vocab:,} (the "
            "larger lm_head, so the draft's step cost is an upper bound; vLLM shares the "
            "target's head then, so no head weights are counted: a published 32,000-row head "
            f"would add {32000 * hidden * 2 / 2**20:,.0f} MiB at 16 bits)")
    return AssumedShape(config=config, assumed=said, upper_bound=True)


def assumed_shape(target_config: dict[str, Any], *, layers: int | None = None,
                  layers_source: str | None = None) -> AssumedShape | str:
    """EAGLE-3's documented construction: one decoder layer unless the card states another."""
    said = (f"the card: {layers_source}" if layers is not None and layers_source else
            "stated by the card" if layers is not None else "EAGLE-3's one layer, arXiv 2503.01840")
    return head_shape(target_config, layers=layers or 1, method=SPEC_NAME, layers_said=said)


SPEC_NAME = "eagle3"


# what every method of the EAGLE-3 family (eagle3, peagle) is, beside its own facts
FAMILY_FACTS: dict[str, Any] = {
    # written out by convert: vLLM reads the key's absence differently (speculators 0.9.0)
    "speculators_defaults": (("norm_before_residual", False), ("norm_before_fc", False),
                             ("fc_norm", False), ("norm_output", False)),
    "has_checkpoint": True,
    "aux_layers_key": "eagle_aux_hidden_state_layer_ids", "trainer_aux_default": True,
    "activation_inputs": "eagle-head", "convert_layout": "speculators",
    "vllm_loads_speculators": True,
}


SPEC = spec_from(
    globals(),
    name=SPEC_NAME,
    aliases=("eagle",),  # other spellings methods.get() accepts
    order=10,
    vllm_method="eagle3",
    speculators_type="eagle3",
    speculators_architecture="Eagle3DraftModel",
    parallel=False,
    # every EAGLE-3 entry of speckit/registry.toml and vLLM's recipes and CI serve k = 3
    usual_k=3,
    norm_before_residual_default=True,  # vLLM algos.py
    **FAMILY_FACTS,
)
