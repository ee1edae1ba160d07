"""Facts and rules every source reader shares: the target, aux layer ids, k, vocab maps, envelope.

Readers call these so that each rule (and its error message) exists once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speckit.convert.moves import ConversionPlan, Slab, TensorMove
from speckit.core import speculators
from speckit.core.methods import MethodSpec
from speckit.core.refs import is_repo_id
from speckit.core.registry import Entry
from speckit.core.tensors import selected_ids
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import (
    CONFIG_DTYPE,
    INDEX_NAME,
    Checkpoint,
    read_index,
    read_ints,
    read_safetensors_header,
    safe_relpath,
)

# the speculators config format version speckit writes (the layout vLLM 0.32/0.33 reads)
SPECULATORS_FORMAT_VERSION = speculators.FORMAT_VERSION
# config.json keys that are bookkeeping, never model structure
META_KEYS = ("auto_map", "_name_or_path", "transformers_version", "_commit_hash",
             "_attn_implementation_autoset")


@dataclass
class Target:
    """What convert reads from the verifier: its config, and borrowed tensors on demand."""

    ref: str | None
    path: Path
    config: dict[str, Any]
    repo_id: str | None = None
    revision: str | None = None
    # remote targets: fetch one file of the pinned revision into ``path`` and return its path
    download: Callable[[str], Path] | None = field(default=None, repr=False)
    _ckpt: Checkpoint | None = field(default=None, repr=False)
    _weight_map: dict[str, str] | None = field(default=None, repr=False)

    @property
    def text(self) -> dict[str, Any]:
        inner = self.config.get("text_config")
        return inner if isinstance(inner, dict) else self.config

    def _int(self, key: str) -> int:
        value = self.text.get(key, self.config.get(key))
        if value is None:
            raise FormatError(f"{self.path / 'config.json'}: target has no {key!r}",
                              hint="TARGET must be the verifier's HF checkpoint directory or repo")
        return int(value)

    @property
    def num_layers(self) -> int:
        return self._int("num_hidden_layers")

    @property
    def hidden_size(self) -> int:
        return self._int("hidden_size")

    @property
    def vocab_size(self) -> int:
        return self._int("vocab_size")

    @property
    def architectures(self) -> list[str]:
        return list(self.config.get("architectures") or self.text.get("architectures") or [])

    @property
    def model_type(self) -> str | None:
        return self.config.get("model_type")

    def checkpoint(self) -> Checkpoint:
        """Header index of the target tensors needed so far (local: the whole checkpoint; remote:
        only the shards downloaded for borrowed tensors)."""
        if self._ckpt is None:
            if self.download is not None:
                self._ckpt = Checkpoint(self.path, self.config, {}, [])
            else:
                has_weights = (self.path / INDEX_NAME).exists() or \
                    any(self.path.glob("*.safetensors"))
                if not has_weights:
                    raise FormatError(
                        f"{self.path}: the target has no safetensors weights, but this draft "
                        f"borrows tensors from it", hint="point TARGET at a directory (or repo) "
                        "with the target's weights")
                self._ckpt = Checkpoint.open(self.path)
        return self._ckpt

    def _remote_names(self) -> dict[str, str]:
        """tensor name -> shard file of a remote target, from its index (one small download)."""
        if self._weight_map is None:
            try:
                index_path = self.download(INDEX_NAME)
            except FileNotFoundError:
                self._weight_map = {}  # single-file checkpoint: names come from its header
                self._fetch_shard("model.safetensors")
            else:  # the same bounded, checked reader as a local index
                self._weight_map = dict(read_index(index_path)["weight_map"])
        return self._weight_map

    def _fetch_shard(self, fname: str) -> None:
        ck = self.checkpoint()
        if fname in ck.files:
            return
        safe_relpath(self.path, fname, what=f"{self.ref} {INDEX_NAME}")
        found, _ = read_safetensors_header(self.download(fname))
        ck.tensors.update(found)
        ck.files.append(fname)
        if self._weight_map is not None:
            for name in found:
                self._weight_map.setdefault(name, fname)

    def find(self, *names: str) -> str | None:
        if self.download is not None:
            wm = self._remote_names()
            name = next((n for n in names if n in wm or n in self.checkpoint().tensors), None)
            if name is not None and name not in self.checkpoint().tensors:
                self._fetch_shard(wm[name])
            return name
        ck = self.checkpoint()
        return next((n for n in names if n in ck.tensors), None)

    def lm_head_name(self) -> str:
        """The target's output head, or its input embedding when the two are tied."""
        name = self.find("lm_head.weight", "model.lm_head.weight", "language_model.lm_head.weight")
        if name is None and self.text.get("tie_word_embeddings",
                                           self.config.get("tie_word_embeddings", False)):
            name = self.find("model.embed_tokens.weight",
                             "model.language_model.embed_tokens.weight", "embed_tokens.weight")
        if name is None:
            raise FormatError(f"{self.path}: the target has no lm_head.weight (and its embeddings "
                              f"are not tied)", hint="is TARGET the verifier checkpoint?")
        return name


@dataclass
class Options:
    """User choices that readers honour (each one overrides what the source records)."""

    num_speculative_tokens: int | None = None
    aux_layers: list[int] | None = None
    mask_token_id: int | None = None
    # k published for this draft in the registry (value, where from); below the source's record
    # (see published_k)
    registry_k: tuple[int, str] | None = None


@dataclass
class ReadContext:
    src: Checkpoint
    layout: Any  # speckit.core.methods.detect.Layout
    target: Target | None
    opts: Options

    @property
    def tgt(self) -> Target:
        if self.target is None:
            raise UsageError(f"converting a {self.layout.name} checkpoint needs --target",
                             hint="pass the verifier (path, registry id or Hub id) with --target")
        return self.target

    def where(self, key: str = "") -> str:
        return f"{self.src.path / 'config.json'}" + (f": {key}" if key else "")


# ---- small rules ---------------------------------------------------------------------------------

def source_dtype(ctx: ReadContext) -> str:
    """The source's working float dtype (most float bytes); every tensor keeps its own dtype."""
    code = ctx.src.float_dtype()
    if code is None:
        raise FormatError(f"{ctx.src.path}: no floating-point tensors")
    return code


def dtype_note(ctx: ReadContext, code: str, plan: ConversionPlan) -> None:
    others = sorted({t.dtype for t in ctx.src.tensors.values()
                     if t.dtype in CONFIG_DTYPE and t.dtype != code})
    if others:
        plan.notes.append(f"float tensors are mostly {code}; those in {', '.join(others)} keep "
                          f"their dtype (config dtype says {CONFIG_DTYPE[code]})")
    declared = ctx.src.config.get("dtype") or ctx.src.config.get("torch_dtype")
    if declared is not None and declared != CONFIG_DTYPE[code]:
        plan.warnings.append(f"source config says dtype {declared!r} but its tensors are "
                             f"{CONFIG_DTYPE[code]}; the output keeps the tensors' dtype and "
                             f"says so")


def check_ids(ids: list[int], *, target: Target, what: str) -> list[int]:
    """Aux layer ids (speculators convention: 0 = embeddings, L = last layer's output) must be
    distinct, ascending (vLLM captures them in ascending order) and inside the target."""
    L = target.num_layers
    bad = [i for i in ids if not 0 <= i <= L]
    if bad:
        raise UsageError(f"{what}: aux layer ids {bad} are outside the target's range [0, {L}] "
                         f"({L} decoder layers)",
                         hint="aux ids follow the speculators convention: 0 is the embedding "
                         "output, k the output of decoder layer k-1")
    if len(set(ids)) != len(ids):
        raise UsageError(f"{what}: aux layer ids {ids} repeat a layer",
                         hint=f"pick distinct layers of the {L}-layer target with --aux-layers")
    if ids != sorted(ids):
        raise UsageError(f"{what}: aux layer ids {ids} are not ascending",
                         hint="vLLM feeds aux hidden states in ascending layer order, so fc's "
                         "inputs would be permuted; the draft was trained on a different order")
    return ids


def resolve_aux(ctx: ReadContext, *, count: int, recorded: list[int] | None,
                recorded_from: str, plan: ConversionPlan, eagle_default: bool = True) -> list[int]:
    """The aux layer ids to write: --aux-layers, else what the source records, else (EAGLE-3
    heads over three layers only) the SafeAILab/SpecForge/vLLM default [2, L//2, L-3]."""
    tgt = ctx.tgt
    if ctx.opts.aux_layers is not None:
        ids, rule = list(ctx.opts.aux_layers), "--aux-layers"
        if recorded is not None and list(recorded) != ids:
            plan.warnings.append(f"--aux-layers {ids} overrides {recorded} recorded in "
                                 f"{recorded_from}")
    elif recorded is not None:
        ids, rule = [int(i) for i in recorded], recorded_from
    elif count == 3 and eagle_default:
        L = tgt.num_layers
        ids, rule = [2, L // 2, L - 3], f"trainer default [2, L//2, L-3] for L={L}"
    else:
        raise UsageError(f"{ctx.src.path}: the draft reads {count} target hidden states but does "
                         f"not record which layers", hint=f"pass --aux-layers with {count} ids")
    if len(ids) != count:
        raise UsageError(f"aux layer ids {ids} ({rule}) name {len(ids)} layers, but the draft's fc "
                         f"reads {count} target hidden states",
                         hint=f"pass --aux-layers with exactly {count} ids")
    check_ids(ids, target=tgt, what=rule)
    plan.aux_layers = ids
    plan.notes.append(f"aux layer ids {ids} from {rule}")
    return ids


# said of every k speckit picks as a default rather than reads from the user or the source
SWEEP_HINT = "`speckit validate --sweep` measures the best k"


def resolve_k(ctx: ReadContext, mod: MethodSpec, config: dict[str, Any], *,
              recorded: int | None, recorded_from: str, plan: ConversionPlan) -> int:
    """speculative_tokens: --num-speculative-tokens, else the source's record, else the
    registry's published k, else the method's rule, else its usual value; refused when none
    applies. A registry or usual k is a default and is said as one, with how to find the best."""
    if ctx.opts.num_speculative_tokens is not None:
        k, rule = int(ctx.opts.num_speculative_tokens), "--num-speculative-tokens"
    elif recorded is not None:
        k, rule = int(recorded), recorded_from
    else:
        k, rule = _default_k(ctx, mod, config)
    mod.check_k(config, k)
    plan.k, plan.k_rule = k, rule
    plan.notes.append(f"k {k}: {rule}" if rule.endswith(SWEEP_HINT)
                      else f"speculative_tokens {k} from {rule}")
    return k


def _default_k(ctx: ReadContext, mod: MethodSpec, config: dict[str, Any]) -> tuple[int, str]:
    """k when neither the user nor the source gives it, and where it came from (a default's
    rule ends with SWEEP_HINT)."""
    if ctx.opts.registry_k is not None:
        k, rule = ctx.opts.registry_k
        return int(k), f"{rule}; {SWEEP_HINT}"
    k = mod.default_k(config)
    if k is not None:  # fixed by the draft's own shape (block size, MTP layers): no guess
        return int(k), f"{mod.name} rule"
    if mod.usual_k is not None:
        return mod.usual_k, f"the method's usual value for {mod.name}; {SWEEP_HINT}"
    raise UsageError(
        f"{ctx.src.path}: the source does not record how many tokens to draft, and "
        f"{mod.name} has no rule that fixes it",
        hint="pass --num-speculative-tokens K (speckit validate measures the best k)")


def published_k(entries: Iterable[Entry], *, registry_id: str | None, repo: str | None,
                commit: str | None = None) -> tuple[int, str] | None:
    """The k the registry publishes for a draft, with where it came from: the entry the draft
    was named by, else the draft entries whose repo is the source's (the one pinned to the
    source's commit first; entries that disagree give none, rather than a pick among them)."""
    entries = [e for e in entries if e.kind == "draft" and e.num_speculative_tokens]
    named = [e for e in entries if registry_id is not None and e.id == registry_id]
    if named:
        return _entry_k(named[0])
    same = [e for e in entries if repo and e.repo and e.repo.lower() == repo.lower()]
    pinned = [e for e in same if commit is not None and e.revision == commit]
    pick = pinned or same
    if not pick or len({e.num_speculative_tokens for e in pick}) != 1:
        return None
    return _entry_k(pick[0], repo=pick[0].repo)


def _entry_k(entry: Entry, *, repo: str | None = None) -> tuple[int, str]:
    why = [f"its repo {repo}"] if repo else []
    why += [entry.k_source] if entry.k_source else []
    return (int(entry.num_speculative_tokens),
            f"registry entry {entry.id}" + (f" ({'; '.join(why)})" if why else ""))


def recorded_k(cfg: dict[str, Any], keys: tuple[str, ...]) -> tuple[int | None, str]:
    for key in keys:
        if cfg.get(key) is not None:
            return int(cfg[key]), f"source config {key}"
    return None, ""


def verifier_name(ctx: ReadContext, plan: ConversionPlan) -> str:
    """The target's Hub repo id when known, else its local path (with the vLLM 0.33 caveat)."""
    tgt = ctx.tgt
    name = tgt.repo_id
    if name is None:
        guess = tgt.config.get("_name_or_path")
        if isinstance(guess, str) and is_repo_id(guess) and not Path(guess).exists():
            name = guess
    if name is None:
        name = str(tgt.path.resolve())
        plan.warnings.append(
            f"verifier.name_or_path is the local path {name}: vLLM 0.33 refuses local verifiers "
            f"when the draft itself is passed as --model; serve with --model <target> and "
            f"--speculative-config instead (or pass TARGET as a Hub id)")
    plan.verifier = name
    return name


def envelope(ctx: ReadContext, *, algorithm: str, k: int, verifier: str) -> dict[str, Any]:
    """speculators_config of the output, verified against TARGET's architectures."""
    return speculators.envelope(algorithm=algorithm, k=k, verifier=verifier,
                                verifier_architectures=ctx.tgt.architectures)


def carry_layer_config(cfg: dict[str, Any], plan: ConversionPlan, *,
                       consumed: dict[str, str]) -> dict[str, Any]:
    """The source config minus the keys a reader took elsewhere (each reason recorded)."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if key in consumed:
            plan.config_fields[key] = consumed[key]
        elif key in META_KEYS:
            plan.config_fields[key] = "bookkeeping, not carried (auto_map would load code)"
        elif key == "torch_dtype":
            plan.config_fields[key] = "written as dtype (transformers 5 key)"
        else:
            out[key] = value
    return out


def rename(src: Checkpoint, name: str, out: str, *, how: str = "rename") -> TensorMove:
    info = src.tensors[name]
    return TensorMove(out, info.dtype, info.shape, (Slab(name),),
                      how="copy" if out == name else how)


def order_moves(moves: list[TensorMove], inputs: dict[str, Checkpoint]) -> list[TensorMove]:
    """Read order = file order, so the copy streams each input file front to back."""
    def key(m: TensorMove):
        s = m.slabs[0]
        info = inputs[s.origin].tensors[s.name]
        return (s.origin != "source", info.file, info.offsets[0], m.out)

    return sorted(moves, key=key)


# ---- vocabulary maps -----------------------------------------------------------------------------

@dataclass
class Vocab:
    target: int  # V
    draft: int  # Vd
    selected: list[int] | None  # target id of each draft id (Vd < V only)


def check_vocab_maps(ctx: ReadContext, plan: ConversionPlan, *, draft_vocab: int,
                     d2t: str | None = "d2t", t2d: str | None = "t2d") -> Vocab:
    """Decide full vs reduced vocabulary and check d2t/t2d exactly (docs/formats.md#vocab-maps).

    Full vocabulary: maps, if shipped, must be the identity and are left out (vLLM has no
    parameter for them and would refuse the checkpoint). Reduced: d2t must give strictly
    increasing target ids inside [0, V), and t2d, if shipped, must mark exactly those ids.
    """
    src = ctx.src
    V = ctx.tgt.vocab_size
    d2t = d2t if d2t in src.tensors else None
    t2d = t2d if t2d in src.tensors else None
    if draft_vocab > V:
        raise FormatError(f"{src.path}: draft vocabulary {draft_vocab} is larger than the target's "
                          f"{V}", hint="is TARGET the verifier this draft was trained for?")
    if t2d is not None and src.tensors[t2d].shape != (V,):
        raise FormatError(f"{src.path}: t2d has shape {list(src.tensors[t2d].shape)}, but the "
                          f"target vocabulary is {V}",
                          hint="the draft was trained for a different verifier vocabulary")
    if draft_vocab == V:
        for name in (d2t, t2d):
            if name is None:
                continue
            vals = read_ints(src, name)
            identity = all(v == 0 for v in vals) if name == d2t else all(vals)
            if not identity:
                raise FormatError(
                    f"{src.path}: {name} is not the identity although the draft vocabulary equals "
                    f"the target's ({V})", hint="a full-vocabulary draft cannot remap ids; the "
                    "checkpoint's vocab maps are inconsistent with its lm_head")
            plan.omitted[name] = ("identity vocab map of a full-vocabulary draft: vLLM has no "
                                  "parameter for it and would refuse it")
        return Vocab(V, V, None)
    if d2t is None:
        raise FormatError(f"{src.path}: the draft vocabulary ({draft_vocab}) is smaller than the "
                          f"target's ({V}) but there is no d2t tensor",
                          hint="without d2t vLLM cannot map draft ids to target ids")
    info = src.tensors[d2t]
    if info.shape != (draft_vocab,) or info.dtype != "I64":
        raise FormatError(f"{src.path}: d2t is {info.dtype}{list(info.shape)}, expected "
                          f"I64[{draft_vocab}]")
    sel = selected_ids(read_ints(src, d2t), read_ints(src, t2d) if t2d is not None else None,
                       vocab=V, where=str(src.path))
    return Vocab(V, draft_vocab, sel)


def vocab_moves(ctx: ReadContext, plan: ConversionPlan, vocab: Vocab, *, dtype: str,
                hidden: int, lm_head: str | None = "lm_head.weight",
                d2t: str = "d2t", t2d: str = "t2d") -> list[TensorMove]:
    """d2t/t2d and lm_head of a reduced-vocabulary draft; lm_head borrowed from target rows when
    the source lacks it (a reduced draft without its own head cannot be served)."""
    src = ctx.src
    moves: list[TensorMove] = []
    if vocab.selected is None:
        if lm_head and lm_head in src.tensors:
            moves.append(rename(src, lm_head, "lm_head.weight"))
        return moves
    moves.append(rename(src, d2t, "d2t"))
    if t2d in src.tensors:
        moves.append(rename(src, t2d, "t2d"))
    if lm_head and lm_head in src.tensors:
        moves.append(rename(src, lm_head, "lm_head.weight"))
        return moves
    tname = ctx.tgt.lm_head_name()
    info = ctx.tgt.checkpoint().tensors[tname]
    if info.shape != (vocab.target, hidden):
        raise FormatError(f"{ctx.tgt.path}: target {tname} is {list(info.shape)}, expected "
                          f"[{vocab.target}, {hidden}] to borrow draft lm_head rows")
    if info.dtype != dtype:
        raise FormatError(f"{ctx.tgt.path}: target {tname} is {info.dtype} but the draft is "
                          f"{dtype}",
                          hint="speckit never casts; convert the draft's dtype first")
    moves.append(TensorMove("lm_head.weight", dtype, (vocab.draft, hidden),
                            (Slab(tname, origin="target"),), gather=tuple(vocab.selected),
                            how="gather"))
    plan.notes.append(f"lm_head.weight: the source has none; taken as the target's {tname} rows "
                      f"selected by d2t (as speculators does)")
    return moves


def check_layer_count(ctx: ReadContext, n_layers: int) -> None:
    """num_hidden_layers, when the source records it, must count the decoder layers on disk."""
    said = ctx.src.config.get("num_hidden_layers")
    if said is not None and int(said) != n_layers:
        raise FormatError(f"{ctx.where('num_hidden_layers')} says {said} but the checkpoint "
                          f"holds {n_layers} decoder layer(s)",
                          hint="fix num_hidden_layers; speckit does not guess which is right")


def aux_count(ctx: ReadContext, t_hidden: int) -> int:
    """How many target hidden states fc.weight reads (its input is a multiple of the target's)."""
    fc_in = ctx.src.tensors["fc.weight"].shape[1]
    if fc_in % t_hidden:
        raise FormatError(f"{ctx.src.path}: fc.weight reads {fc_in} features, not a multiple of "
                          f"the target hidden size {t_hidden}",
                          hint="is TARGET the verifier this draft was trained for?")
    return fc_in // t_hidden


def check_vocab_size(ctx: ReadContext) -> None:
    """A recorded vocab_size must be the target's (drafts score the verifier's vocabulary)."""
    said, V = ctx.src.config.get("vocab_size"), ctx.tgt.vocab_size
    if said is not None and int(said) != V:
        raise FormatError(f"{ctx.where('vocab_size')} is {said} but the target's vocabulary is "
                          f"{V}", hint="is TARGET the verifier this draft was trained for?")


def check_hidden_sizes(ctx: ReadContext, src, cfg: dict[str, Any], tgt) -> tuple[int, int]:
    """(draft hidden, target hidden): the draft's from norm.weight, both checked against the
    config."""
    hidden = src.tensors["norm.weight"].shape[0]
    if cfg.get("hidden_size") is not None and int(cfg["hidden_size"]) != hidden:
        raise FormatError(f"{ctx.where('hidden_size')} is {cfg['hidden_size']} but norm.weight "
                          f"is [{hidden}]")
    t_hidden = tgt.hidden_size
    if cfg.get("target_hidden_size") is not None and int(cfg["target_hidden_size"]) != t_hidden:
        raise FormatError(f"{ctx.where('target_hidden_size')} is {cfg['target_hidden_size']} but "
                          f"the target's hidden_size is {t_hidden}",
                          hint="is TARGET the verifier this draft was trained for?")
    return hidden, t_hidden
