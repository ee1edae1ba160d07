"""The EAGLE-3 draft head in plain torch, computing exactly what vLLM's Eagle3LlamaForCausalLM does.

Layer 0 sees cat(input_layernorm(embed), hidden_norm(h)) (2H wide); later layers (``--layers``)
are plain pre-norm Llama layers over the residual stream; unroll() runs training-time test. The
lm_head is the draft's own (its vocabulary, trained) or, with ``shared_lm_head``, the target's:
frozen, the full vocabulary, and not exported (vLLM then gives the draft the target's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from speckit.core import hfconfig
from speckit.errors import FormatError, UsageError


@dataclass(frozen=True)
class HeadConfig:
    """Shapes and flags of a Llama-style EAGLE-3 head."""

    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int  # target vocabulary V
    draft_vocab_size: int  # Vd
    target_hidden_size: int
    num_aux: int
    # vLLM's default when the key is absent; we always write it and train with it
    norm_before_residual: bool = True
    num_layers: int = 1  # decoder layers; layer 0 reads [embed ; hidden], the rest are plain
    shared_lm_head: bool = False  # the target's lm_head (frozen, full vocab, not exported)
    fc_norm: bool = False  # an RMSNorm on each aux state before fc (vLLM's fc_norm.{i})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def head_config_from_target(target_cfg: dict[str, Any], *, draft_vocab_size: int, num_aux: int,
                            num_layers: int = 1, shared_lm_head: bool = False,
                            fc_norm: bool = False,
                            where: str = "target config.json") -> HeadConfig:
    """Draft dims copied from the target's decoder config (as speculators' trainer does)."""
    cfg = target_cfg.get("text_config") if isinstance(target_cfg.get("text_config"), dict) \
        else target_cfg
    att = hfconfig.attention(cfg, where=where)
    vocab = hfconfig.need_int(cfg, "vocab_size", where=where)
    inter = hfconfig.need_int(cfg, "intermediate_size", where=where)
    # the draft's own layer config is ours to write: plain RoPE with the target's theta, both
    # in training and in the exported transformer_layer_config, whatever scaling the target has
    theta = hfconfig.rope_theta(cfg, where=where, default=10000.0)
    eps = hfconfig.get_float(cfg, "rms_norm_eps", where=where, default=1e-6)
    max_pos = hfconfig.get_int(cfg, "max_position_embeddings", where=where, default=4096)
    check_head_options(num_layers=num_layers, shared_lm_head=shared_lm_head,
                       draft_vocab_size=draft_vocab_size, vocab_size=vocab)
    return HeadConfig(
        hidden_size=att.hidden_size, num_attention_heads=att.num_heads,
        num_key_value_heads=att.num_kv_heads, head_dim=att.head_dim, intermediate_size=inter,
        rms_norm_eps=eps, rope_theta=theta, max_position_embeddings=max_pos, vocab_size=vocab,
        draft_vocab_size=int(draft_vocab_size), target_hidden_size=att.hidden_size,
        num_aux=int(num_aux), num_layers=int(num_layers), shared_lm_head=bool(shared_lm_head),
        fc_norm=bool(fc_norm))


def check_head_options(*, num_layers: int, shared_lm_head: bool, draft_vocab_size: int,
                       vocab_size: int) -> None:
    """At least one layer; a shared lm_head is the target's, so the vocabulary is the target's."""
    if num_layers < 1:
        raise UsageError(f"--layers {num_layers} must be >= 1")
    if shared_lm_head and draft_vocab_size != vocab_size:
        raise UsageError(f"--shared-lm-head uses the target's lm_head over all {vocab_size} "
                         f"tokens; --draft-vocab {draft_vocab_size} would reduce it",
                         hint="drop --draft-vocab, or drop --shared-lm-head")


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * x).to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rope(nn.Module):
    """Neox-style rotary embedding (vLLM's Llama uses is_neox_style=True)."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x [B, heads, T, hd]; positions [B, T]
        freqs = positions.float()[..., None] * self.inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, hd]
        cos, sin = emb.cos(), emb.sin()
        xf = x.float()
        return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)


class DecoderLayer(nn.Module):
    """One layer of the head. The first reads [input_layernorm(embed) ; hidden_norm(h)] (q/k/v
    2H wide, vLLM's llama_eagle3 layer 0); the others are pre-norm Llama layers over the residual
    stream (vLLM runs them as layer_idx > 0, with no embeddings and no hidden_norm)."""

    def __init__(self, cfg: HeadConfig, *, first: bool):
        super().__init__()
        h, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, \
            cfg.head_dim
        width = 2 * h if first else h
        self.cfg, self.first = cfg, first
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        if first:
            self.hidden_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(width, nh * hd, bias=False)
        self.self_attn.k_proj = nn.Linear(width, nkv * hd, bias=False)
        self.self_attn.v_proj = nn.Linear(width, nkv * hd, bias=False)
        self.self_attn.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.rope = Rope(hd, cfg.rope_theta)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor,
                cache: list[tuple[torch.Tensor, torch.Tensor]],
                embeds: torch.Tensor | None = None) -> torch.Tensor:
        """One TTT step. ``cache`` holds (k, v) of earlier steps and gets this step's appended.

        Returns the pre-norm output (the residual stream): the next layer's input, and after
        the last layer what vLLM feeds back as the next step's hidden state.
        """
        if self.first:
            hn = self.hidden_norm(hidden)
            residual = hn if self.cfg.norm_before_residual else hidden
            x = torch.cat([self.input_layernorm(embeds), hn], dim=-1)
        else:
            residual, x = hidden, self.input_layernorm(hidden)
        residual = self._attention(x, positions, cache) + residual
        x = self.post_attention_layernorm(residual)
        mlp = self.mlp
        return mlp.down_proj(F.silu(mlp.gate_proj(x)) * mlp.up_proj(x)) + residual

    def _attention(self, x: torch.Tensor, positions: torch.Tensor,
                   cache: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        cfg, attn = self.cfg, self.self_attn
        b, t, _ = x.shape
        q = attn.q_proj(x).view(b, t, cfg.num_attention_heads, cfg.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, cfg.num_key_value_heads, cfg.head_dim).transpose(1, 2)
        q = self.rope(q, positions)
        k = self.rope(k, positions)
        cache.append((k, v))
        o = ttt_attention(q, cache, num_kv_groups=cfg.num_attention_heads
                          // cfg.num_key_value_heads)
        return attn.o_proj(o.transpose(1, 2).reshape(b, t, -1))


def ttt_attention(q: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]], *,
                  num_kv_groups: int) -> torch.Tensor:
    """Attention of TTT step j = len(cache) - 1 for every anchor position a at once.

    Step 0's keys are the context (anchors b <= a, causal); step k >= 1 adds one key per anchor,
    its own (the draft token it proposed at position a + k). That is what a query at draft step
    j sees in vLLM: the verified context from step 0 plus the chain of its own draft tokens.
    """
    t = q.shape[2]
    keys = torch.cat([k for k, _ in cache], dim=2)
    values = torch.cat([v for _, v in cache], dim=2)
    if num_kv_groups > 1:
        keys = keys.repeat_interleave(num_kv_groups, dim=1)
        values = values.repeat_interleave(num_kv_groups, dim=1)
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    eye = torch.eye(t, dtype=torch.bool, device=q.device)
    mask = torch.cat([causal] + [eye] * (len(cache) - 1), dim=1)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


class Eagle3Head(nn.Module):
    """fc over the concatenated aux states, the decoder layers, final norm, lm_head.

    The token embedding is the target's, frozen, and never exported (vLLM shares the target's);
    so is the lm_head when ``cfg.shared_lm_head`` (``lm_head_weight``: the target's [V, H]).
    """

    def __init__(self, cfg: HeadConfig, embed_weight: torch.Tensor,
                 lm_head_weight: torch.Tensor | None = None):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.embed_tokens.weight = _frozen_copy(embed_weight, cfg, what="embedding")
        self.fc_norm = nn.ModuleList([RMSNorm(cfg.target_hidden_size, cfg.rms_norm_eps)
                                      for _ in range(cfg.num_aux if cfg.fc_norm else 0)])
        self.fc = nn.Linear(cfg.num_aux * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.layers = nn.ModuleList([DecoderLayer(cfg, first=i == 0)
                                     for i in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        if cfg.shared_lm_head:
            if lm_head_weight is None:
                raise UsageError("a shared-lm_head EAGLE-3 head needs the target's lm_head")
            self.lm_head.weight = _frozen_copy(lm_head_weight, cfg, what="lm_head")

    def init_weights(self, *, lm_head_rows: torch.Tensor, final_norm: torch.Tensor | None,
                     seed: int) -> None:
        """Small random linears (std 0.02); lm_head = target head rows of the draft vocab."""
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            if name.endswith("norm.weight") or "layernorm" in name or name.startswith("fc_norm."):
                p.data.fill_(1.0)
            elif name == "lm_head.weight":
                p.data.copy_(lm_head_rows)
            else:
                p.data.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        if final_norm is not None:
            self.norm.weight.data.copy_(final_norm)

    def trainable(self) -> dict[str, nn.Parameter]:
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def forward(self, input_ids: torch.Tensor, aux: torch.Tensor, steps: int
                ) -> list[torch.Tensor]:
        """Logits [B, T, Vd] of every TTT step (a module call, so FSDP2's hooks gather params)."""
        return [logits for _, logits in self.unroll(input_ids, aux, steps)]

    def unroll(self, input_ids: torch.Tensor, aux: torch.Tensor, steps: int):
        """Yield (j, logits [B, T, Vd]) for TTT steps j = 0..steps-1.

        Row a (the anchor) of step j is the draft at position a + j predicting the token after
        position a + 1 + j: its input token is input_ids[a + 1 + j] (the verified one; at serve
        time it is the draft's own guess, which only matters when that guess was right) and its
        hidden state is step j-1's pre-norm output at the same anchor (step 0: fc(aux[a])).
        """
        b, t = input_ids.shape
        if steps < 1:
            raise UsageError("--ttt-steps must be >= 1")
        anchor = torch.arange(t, device=input_ids.device).expand(b, t)
        hidden = self.fc(self._normed(aux).to(self.fc.weight.dtype))  # shards hold bf16
        caches: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in self.layers]
        for j in range(steps):
            ids = shift_left(input_ids, 1 + j)
            out = hidden
            for layer, cache in zip(self.layers, caches, strict=True):
                embeds = self.embed_tokens(ids).to(hidden.dtype) if layer.first else None
                out = layer(out, anchor + j, cache, embeds=embeds)
            yield j, self.lm_head(self.norm(out))
            hidden = out

    def _normed(self, aux: torch.Tensor) -> torch.Tensor:
        """The aux states as fc reads them: each one RMS-normalised first with ``fc_norm``."""
        if not self.fc_norm:
            return aux
        chunks = aux.chunk(len(self.fc_norm), dim=-1)
        return torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks, strict=True)], -1)


def _frozen_copy(weight: torch.Tensor, cfg: HeadConfig, *, what: str) -> nn.Parameter:
    """A copy of one of the target's [V, H] tensors, not trained."""
    if tuple(weight.shape) != (cfg.vocab_size, cfg.hidden_size):
        raise FormatError(f"target {what} is {list(weight.shape)}, expected "
                          f"[{cfg.vocab_size}, {cfg.hidden_size}]")
    return nn.Parameter(weight.detach().clone().float(), requires_grad=False)


def shift_left(x: torch.Tensor, n: int, fill: int = 0) -> torch.Tensor:
    """x[:, n:] padded on the right with ``fill`` to the same length."""
    if n == 0:
        return x
    pad = torch.full_like(x[:, :n], fill)
    return torch.cat([x[:, n:], pad], dim=1)[:, : x.shape[1]] if n < x.shape[1] \
        else torch.full_like(x, fill)


def exported(name: str, cfg: HeadConfig) -> bool:
    """Whether a head state tensor goes into the draft: not the target's frozen embedding, nor
    its lm_head when shared (vLLM gives the draft both of the target's)."""
    return not (name.startswith("embed_tokens.")
                or (cfg.shared_lm_head and name.startswith("lm_head.")))


def param_count(head: Eagle3Head) -> int:
    return sum(p.numel() for p in head.trainable().values())
