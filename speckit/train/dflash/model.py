"""The DFlash drafter in plain torch, computing what vLLM's DFlashQwen3 (qwen3_dflash.py) serves.

Context: hidden_norm(fc(aux)) of positions < anchor, projected by each layer's k/v (k_norm, RoPE);
query block: [anchor token, mask x (B-1)] through Qwen3 layers, non-causal inside the block.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from speckit.core import hfconfig
from speckit.errors import FormatError, UsageError
from speckit.train.model import RMSNorm, Rope


@dataclass(frozen=True)
class DFlashConfig:
    """Shapes and choices of a DFlash draft; hidden = the target's (it shares its embedding)."""

    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int
    target_hidden_size: int
    num_aux: int
    block_size: int
    mask_token_id: int
    causal: bool = False  # vLLM serves speculators DFlash non-causal inside the block
    # vLLM CPU (0.32) normalizes every layer's context keys with layer 0's k_norm weight: its
    # grouped rms_norm kernel reads only the first row of the stacked [L, head_dim] weight.
    # True reproduces that, to compare a per-layer draft with acceptance measured there.
    ctx_k_norm_layer0: bool = False
    # one k_norm weight shared by every layer: then vLLM CPU's quirk above changes nothing, and
    # the draft is served as trained on CPU and GPU alike
    tie_k_norm: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def config_from_target(target_cfg: dict[str, Any], *, num_layers: int, num_aux: int,
                       block_size: int, mask_token_id: int,
                       where: str = "target config.json") -> DFlashConfig:
    """Draft dims copied from the target's decoder config; depth and block are ours."""
    cfg = target_cfg.get("text_config") if isinstance(target_cfg.get("text_config"), dict) \
        else target_cfg
    att = hfconfig.attention(cfg, where=where)
    if num_layers < 1:
        raise UsageError(f"--layers {num_layers} must be >= 1")
    if block_size < 2:
        raise UsageError(f"--block-size {block_size} must be >= 2 (anchor + at least one mask)")
    vocab = hfconfig.need_int(cfg, "vocab_size", where=where)
    if not 0 <= mask_token_id < vocab:
        raise UsageError(f"--mask-token-id {mask_token_id} is outside [0, {vocab})")
    return DFlashConfig(
        hidden_size=att.hidden_size, num_layers=num_layers, num_attention_heads=att.num_heads,
        num_key_value_heads=att.num_kv_heads, head_dim=att.head_dim,
        intermediate_size=hfconfig.need_int(cfg, "intermediate_size", where=where),
        rms_norm_eps=hfconfig.get_float(cfg, "rms_norm_eps", where=where, default=1e-6),
        rope_theta=hfconfig.rope_theta(cfg, where=where, default=10000.0),
        max_position_embeddings=hfconfig.get_int(cfg, "max_position_embeddings", where=where,
                                                 default=4096),
        vocab_size=vocab, target_hidden_size=att.hidden_size, num_aux=num_aux,
        block_size=block_size, mask_token_id=int(mask_token_id))


class DFlashLayer(nn.Module):
    """A Qwen3 decoder layer whose keys/values are [context ; block] (vLLM's cache layout)."""

    def __init__(self, cfg: DFlashConfig):
        super().__init__()
        h, nh, nkv, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, \
            cfg.head_dim
        self.cfg = cfg
        self.input_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(h, cfg.rms_norm_eps)
        self.self_attn = nn.Module()
        self.self_attn.q_proj = nn.Linear(h, nh * hd, bias=False)
        self.self_attn.k_proj = nn.Linear(h, nkv * hd, bias=False)
        self.self_attn.v_proj = nn.Linear(h, nkv * hd, bias=False)
        self.self_attn.o_proj = nn.Linear(nh * hd, h, bias=False)
        self.self_attn.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.self_attn.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.mlp = nn.Module()
        self.mlp.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.mlp.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.mlp.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)

    def _kv(self, x: torch.Tensor, positions: torch.Tensor, rope: Rope,
            k_norm: nn.Module | None = None):
        """k (k_norm, then RoPE) and v of ``x`` [B, T, H], as [B, nkv, T, hd]."""
        c, a = self.cfg, self.self_attn
        b, t, _ = x.shape
        k_norm = a.k_norm if k_norm is None else k_norm
        k = k_norm(a.k_proj(x).view(b, t, c.num_key_value_heads, c.head_dim)).transpose(1, 2)
        v = a.v_proj(x).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        return rope(k, positions), v

    def forward(self, x: torch.Tensor, ctx: torch.Tensor, positions: torch.Tensor,
                ctx_positions: torch.Tensor, mask: torch.Tensor, rope: Rope,
                ctx_k_norm: nn.Module | None = None) -> torch.Tensor:
        """x [B, Q, H] block tokens at ``positions``; ctx [B, T, H] = hidden_norm(fc(aux)).

        The context goes straight into k/v (no input_layernorm), as vLLM's
        precompute_and_store_context_kv does; ``mask`` [B, Q, T + Q] says who sees what;
        ``ctx_k_norm`` replaces this layer's k_norm on the context keys (the vLLM CPU quirk).
        """
        c, a = self.cfg, self.self_attn
        b, q_len, _ = x.shape
        h = self.input_layernorm(x)
        q = a.q_norm(a.q_proj(h).view(b, q_len, c.num_attention_heads, c.head_dim))
        q = rope(q.transpose(1, 2), positions)
        k_blk, v_blk = self._kv(h, positions, rope)
        k_ctx, v_ctx = self._kv(ctx, ctx_positions, rope, ctx_k_norm)
        keys, values = torch.cat([k_ctx, k_blk], 2), torch.cat([v_ctx, v_blk], 2)
        groups = c.num_attention_heads // c.num_key_value_heads
        if groups > 1:
            keys = keys.repeat_interleave(groups, dim=1)
            values = values.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q, keys.to(q.dtype), values.to(q.dtype),
                                           attn_mask=mask[:, None])
        x = x + a.o_proj(o.transpose(1, 2).reshape(b, q_len, -1))
        y = self.post_attention_layernorm(x)
        m = self.mlp
        return x + m.down_proj(F.silu(m.gate_proj(y)) * m.up_proj(y))


class DFlashDraft(nn.Module):
    """fc + hidden_norm over the aux states, N Qwen3 layers, final norm; the target's embedding
    and lm_head, frozen and never exported (vLLM shares the target's)."""

    def __init__(self, cfg: DFlashConfig, embed_weight: torch.Tensor,
                 lm_head_weight: torch.Tensor):
        super().__init__()
        want = (cfg.vocab_size, cfg.hidden_size)
        for name, w in (("embedding", embed_weight), ("lm_head", lm_head_weight)):
            if tuple(w.shape) != want:
                raise FormatError(f"target {name} is {list(w.shape)}, expected {list(want)}")
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(*want)
        self.embed_tokens.weight.data.copy_(embed_weight)
        self.embed_tokens.weight.requires_grad_(False)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.lm_head.weight.data.copy_(lm_head_weight)
        self.lm_head.weight.requires_grad_(False)
        self.fc = nn.Linear(cfg.num_aux * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.layers = nn.ModuleList([DFlashLayer(cfg) for _ in range(cfg.num_layers)])
        if cfg.tie_k_norm:
            for layer in self.layers[1:]:
                layer.self_attn.k_norm = self.layers[0].self_attn.k_norm
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.rope = Rope(cfg.head_dim, cfg.rope_theta)

    def init_weights(self, *, seed: int) -> None:
        """Linears ~ N(0, 0.02), norms 1, except the final norm: 16 / (sqrt(H) x mean
        embedding norm), at most 1.

        At init the residual stream is the slot's token embedding, and with the target's
        lm_head (tied to that embedding in many targets) the slot's own token then wins by tens
        of nats: cross-entropy starts at 67 on SmolLM2 with norm 1. Its scale (0.21 there)
        starts at 17 and was lowest after 30 steps among 0.026, 0.2 and 1.
        """
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.trainable().items():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.data.fill_(1.0)
            else:
                p.data.copy_(torch.randn(p.shape, generator=gen) * 0.02)
        rms = float(self.embed_tokens.weight.float().norm(dim=1).mean())
        self.norm.weight.data.fill_(min(1.0, 16.0 / (self.cfg.hidden_size ** 0.5 * max(rms, 1e-6))))

    def trainable(self) -> dict[str, nn.Parameter]:
        """Each trainable parameter once (a tied k_norm under layer 0's name)."""
        return {n: p for n, p in self.named_parameters() if p.requires_grad}

    def exported(self) -> dict[str, torch.Tensor]:
        """CPU copies of the trainable tensors under every name they serve (a tied k_norm once
        per layer, as the speculators layout and vLLM expect)."""
        return {n: p.detach().cpu().clone()
                for n, p in self.named_parameters(remove_duplicate=False) if p.requires_grad}

    def forward(self, input_ids: torch.Tensor, aux: torch.Tensor, anchors: torch.Tensor
                ) -> torch.Tensor:
        """Logits [B, N, B-1, V] of the mask slots of the blocks anchored at ``anchors`` [B, N].

        Slot i of the block at anchor p sits at position p + i and proposes the token there.
        """
        cfg = self.cfg
        bsz, t = input_ids.shape
        n, blk = anchors.shape[1], cfg.block_size
        dev = input_ids.device
        ctx = self.hidden_norm(self.fc(aux.to(self.fc.weight.dtype)))
        offs = torch.arange(blk, device=dev)
        positions = (anchors[..., None] + offs).reshape(bsz, n * blk)
        ids = torch.full((bsz, n, blk), cfg.mask_token_id, dtype=input_ids.dtype, device=dev)
        ids[..., 0] = input_ids.gather(1, anchors)
        x = self.embed_tokens(ids.reshape(bsz, n * blk)).to(ctx.dtype)
        mask = block_mask(anchors, t, blk, causal=cfg.causal)
        ctx_pos = torch.arange(t, device=dev).expand(bsz, t)
        k_norm0 = self.layers[0].self_attn.k_norm if cfg.ctx_k_norm_layer0 else None
        for layer in self.layers:
            x = layer(x, ctx, positions, ctx_pos, mask, self.rope, k_norm0)
        x = self.norm(x).view(bsz, n, blk, -1)[:, :, 1:]
        return self.lm_head(x.to(self.lm_head.weight.dtype))


def block_mask(anchors: torch.Tensor, ctx_len: int, blk: int, *, causal: bool) -> torch.Tensor:
    """bool [B, N*blk, ctx_len + N*blk]: a slot of block j sees context positions < anchor_j and
    its own block (all of it, or slots up to itself when causal), nothing of other blocks."""
    bsz, n = anchors.shape
    dev = anchors.device
    q_anchor = anchors.repeat_interleave(blk, dim=1)  # [B, Q]
    ctx = torch.arange(ctx_len, device=dev)[None, None, :] < q_anchor[..., None]
    block_of = torch.arange(n * blk, device=dev) // blk
    same = block_of[:, None] == block_of[None, :]
    if causal:
        same = same & (torch.arange(n * blk, device=dev)[None, :]
                       <= torch.arange(n * blk, device=dev)[:, None])
    return torch.cat([ctx, same.expand(bsz, -1, -1)], dim=2)


def param_count(draft: DFlashDraft) -> int:
    return sum(p.numel() for p in draft.trainable().values())
