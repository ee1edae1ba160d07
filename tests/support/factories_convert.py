"""Fixture variants the convert tests need on top of tests/support/factories.py.

Patches of factory output (zero final norms for known-answer vLLM runs, chosen vocab maps,
uniform layer types, extra tensors, code files) and a config-only Gemma-4 target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from tests.support import factories as F


def _tensors(path: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """All tensors of a single-file checkpoint (safetensors or SafeAILab pickle)."""
    st = path / "model.safetensors"
    if st.exists():
        return load_file(str(st)), st
    pt = path / "pytorch_model.bin"
    return torch.load(pt, weights_only=True), pt


def patch_tensors(path: Path | str, **tensors: torch.Tensor | None) -> Path:
    """Replace (or, with None, remove) tensors of a single-file checkpoint, keeping its format."""
    path = Path(path)
    t, f = _tensors(path)
    for name, value in tensors.items():
        if value is None:
            t.pop(name, None)
        else:
            t[name] = value.contiguous()
    if f.suffix == ".bin":
        torch.save(t, f)
    else:
        save_file(t, str(f), metadata={"format": "pt"})
    return path


def patch_config(path: Path | str, **fields: Any) -> Path:
    """Set (or, with None, delete) top-level config.json fields."""
    path = Path(path)
    cfg = json.loads((path / "config.json").read_text())
    for k, v in fields.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return path


def zero_final_norm(path: Path | str, name: str = "norm.weight") -> Path:
    """A final RMSNorm of zeros makes every logit exactly 0, so greedy decoding always picks the
    lowest id the head can emit: a known answer for end-to-end acceptance in vLLM."""
    t, _ = _tensors(Path(path))
    return patch_tensors(path, **{name: torch.zeros_like(t[name])})


def set_vocab_maps(path: Path | str, selected: list[int], vocab: int) -> Path:
    """Rewrite d2t/t2d so that draft id i is target id selected[i] (sorted ascending)."""
    sel = torch.tensor(sorted(selected), dtype=torch.int64)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[sel] = True
    return patch_tensors(path, d2t=sel - torch.arange(len(sel)), t2d=t2d)


def selected_ids(path: Path | str) -> list[int]:
    t, _ = _tensors(Path(path))
    d2t = t["d2t"]
    return (d2t + torch.arange(len(d2t))).tolist()


def make_zlab_dflash_uniform(path: Path | str, *, layer_type: str = "sliding_attention",
                             **kw: Any) -> Path:
    """z-lab "new" config (nested block_size) whose layers share one attention type, which the
    CPU (V1) runner accepts; the factory's mixed variant needs vLLM's V2 runner."""
    out = F.make_zlab_dflash(path, style="new", **kw)
    n = json.loads((out / "config.json").read_text())["num_hidden_layers"]
    return patch_config(out, layer_types=[layer_type] * n)


def make_specforge_dspark_reduced(path: Path | str, *, dims: F.Dims = F.DIMS,
                                  seed: int = 7) -> Path:
    """SpecForge DSpark with a reduced draft vocabulary: its own lm_head, d2t and t2d, while
    markov_w2 stays over the full vocabulary (SpecForge's convention)."""
    out = F.make_specforge_dspark(path, dims=dims)
    g = torch.Generator().manual_seed(seed)
    sel = torch.randperm(dims.vocab, generator=g)[:dims.draft_vocab].sort().values
    t, _ = _tensors(out)
    dtype = t["norm.weight"].dtype
    patch_tensors(out, **{"lm_head.weight": torch.randn(dims.draft_vocab, dims.hidden,
                                                        generator=g).to(dtype)})
    return set_vocab_maps(out, sel.tolist(), dims.vocab)


def make_gemma4_target_config(path: Path | str, *, hidden: int = F.DIMS.hidden,
                              vocab: int = F.DIMS.vocab, num_layers: int = 8) -> Path:
    """A Gemma-4 target directory holding only config.json (convert reads nothing else of it)."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    text = {"model_type": "gemma4_text", "hidden_size": hidden, "vocab_size": vocab,
            "num_hidden_layers": num_layers, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 32, "intermediate_size": 128}
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
           "text_config": text, "dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out


def add_code_artifacts(path: Path | str) -> Path:
    """What speculators' save_pretrained leaves: config.py, auto_map, and a stray model_type."""
    out = Path(path)
    (out / "config.py").write_text("raise SystemExit('speckit must never run or copy this')\n")
    return patch_config(out, auto_map={"": "config.Eagle3SpeculatorConfig"},
                        model_type="eagle3")
