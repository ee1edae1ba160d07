"""speckit.core.quant, the scheme table: each entry's quantization_config is recognised as itself
and only itself, plan prices a quantized draft at exactly the bytes `speckit quantize` writes,
the GPU formats mapping drives native/emulated, and the CLI flags reach every scheme.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from speckit.core import quant as core_quant
from speckit.core.gpus import builtin_gpu
from speckit.core.plan.weights import DRAFT_QUANTS, HeaderTensor, rank_bytes
from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import DTYPE_BITS, FLOAT_DTYPES, Checkpoint
from speckit.io.datafiles import load_user_gpus
from speckit.io.host import probe_kernel

SHIPPED_DRAFT = Path(__file__).parents[2] / "speckit/data/drafts/smollm2-135m-eagle3"
TARGET_LAYERS = 30  # SmolLM2-135M, the shipped draft's target


def _headers(ckpt: Checkpoint) -> list[HeaderTensor]:
    return [HeaderTensor(t.name, t.dtype, t.shape, DTYPE_BITS[t.dtype], t.dtype in FLOAT_DTYPES)
            for t in ckpt.tensors.values()]


def test_every_config_is_recognised_as_its_own_scheme():
    for s in core_quant.SCHEMES.values():
        cfg = s.quantization_config(["lm_head"])
        assert [o.name for o in core_quant.SCHEMES.values() if o.recognise(cfg)] == [s.name]
        assert core_quant.recognise(cfg) is s
    assert core_quant.recognise({"quant_method": "gptq", "bits": 4}) is None
    assert core_quant.recognise(None) is None


def test_bits_per_weight_come_from_the_tensors():
    bpw = {n: s.bits_per_weight() for n, s in core_quant.SCHEMES.items()}
    assert bpw["mxfp4"] == 4 + 8 / 32  # E2M1 + one E8M0 per 32
    assert bpw["nvfp4"] == pytest.approx(4 + 8 / 16 + 32 / (256 * 4096))  # + one F32 global
    assert bpw["fp8"] == 8 + 32 / 4096  # one F32 scale per row of 4096
    assert bpw["fp8-ct"] == 8 + 16 / 4096  # one BF16 scale per row


@pytest.fixture(scope="module")
def quantized(tmp_path_factory):
    from speckit.quant import quantize

    root = tmp_path_factory.mktemp("q")
    return {s: quantize(SHIPPED_DRAFT, scheme=s, out=root / s, target_layers=TARGET_LAYERS)
            for s in ("mxfp4", "fp8", "fp8-ct", "nvfp4")}


@pytest.mark.parametrize("scheme", ["mxfp4", "fp8", "fp8-ct", "nvfp4"])
def test_plan_prices_exactly_what_quantize_writes(quantized, scheme):
    """--draft-quant on the bf16 draft == the quantized checkpoint as vLLM loads it == the bytes
    in its file (the old FP8 formula priced a bf16 per-tensor scale: 2 B per weight instead of
    4 B per row)."""
    src, out = Checkpoint.open(SHIPPED_DRAFT), Checkpoint.open(quantized[scheme].out)
    priced, _ = rank_bytes(_headers(src), tp=1, kv_heads=None, model_bytes=2, quant=scheme)
    loaded, stored = rank_bytes(_headers(out), tp=1, kv_heads=None, model_bytes=2)
    # t2d is never loaded by vLLM, so neither side counts it
    assert priced == loaded == stored
    assert stored == sum(t.nbytes for t in out.tensors.values()) - out.tensors["t2d"].nbytes


def test_fp8_scale_bytes_are_per_channel_f32():
    sch = core_quant.get("fp8")
    assert sch.weight_bytes((1536, 576)) == 1536 * 576 + 4 * 1536


def test_draft_quant_takes_every_scheme():
    assert set(DRAFT_QUANTS) == {"bf16", *core_quant.SCHEMES}


def test_gpu_formats_native_and_emulated():
    h200, b200, a100 = builtin_gpu("H200"), builtin_gpu("B200"), builtin_gpu("A100")
    assert h200.native("fp8") and h200.format_status("nvfp4") == "emulated"
    assert b200.native("nvfp4") and b200.native("mxfp4")
    assert a100.format_status("fp8") == "no"
    names = {s.name for s in core_quant.draft_quant_suggestions(h200)}
    assert names == {"fp8-ct", "mxfp4", "nvfp4"}  # NVIDIA: compressed-tensors FP8
    assert {s.name for s in core_quant.draft_quant_suggestions(builtin_gpu("MI300X"))} >= {"fp8"}


def test_user_gpu_formats_table(tmp_path):
    p = tmp_path / "g.toml"
    p.write_text('[[gpu]]\nname = "X"\nmemory_gib = 8\nformats = { nvfp4 = "native" }\n'
                 'fp8 = true\n')
    g = load_user_gpus(p)[0]
    assert g.native("nvfp4") and g.native("fp8") and g.format_status("mxfp4") == "no"
    p.write_text('[[gpu]]\nname = "X"\nmemory_gib = 8\nformats = { fp8 = "no" }\nfp8 = true\n')
    with pytest.raises(FormatError, match="disagrees"):
        load_user_gpus(p)
    p.write_text('[[gpu]]\nname = "X"\nmemory_gib = 8\nformats = { nvfp4 = "fast" }\n')
    with pytest.raises(FormatError, match="nvfp4 must be native, emulated or no"):
        load_user_gpus(p)


@pytest.mark.parametrize(("args", "scheme"), [
    (["--fp8"], "fp8"), (["--fp8", "--per-tensor-static"], "fp8-static"),
    (["--fp8", "--format", "compressed-tensors"], "fp8-ct"), (["--nvfp4"], "nvfp4"),
    (["--nvfp4", "--format", "compressed-tensors"], "nvfp4"), (["--mxfp4"], "mxfp4"),
    (["--mxfp4-w4a4"], "mxfp4-w4a4")])
def test_cli_flags_name_every_scheme(args, scheme):
    from speckit.cli.quantize import _scheme

    on = {w.dest: w.flag in args for w in core_quant.SWITCHES}
    fmt = args[args.index("--format") + 1] if "--format" in args else None
    assert _scheme(on, fmt).name == scheme
    # and each scheme's own flags name it
    assert core_quant.get(scheme).flags.split() in (args, args[:1])


def test_quantize_options_are_the_scheme_tables_switches():
    from speckit.cli.quantize import quantize_cmd

    opts = {o: p for p in quantize_cmd.params for o in p.opts}
    for w in core_quant.SWITCHES:
        assert opts[w.flag].is_flag and opts[w.flag].help == w.help and opts[w.flag].name == w.dest
    assert list(opts["--format"].type.choices) == list(core_quant.LAYOUTS)
    assert all(w in core_quant.SWITCHES for s in core_quant.SCHEMES.values() for w in s.switches)


def test_no_nvfp4_in_quark_layout():
    with pytest.raises(UsageError, match="no scheme for --nvfp4 in the quark layout"):
        core_quant.for_switches({"--nvfp4"}, "quark")
    with pytest.raises(UsageError, match="--per-tensor-static goes with --fp8"):
        core_quant.for_switches({"--mxfp4", "--per-tensor-static"})
    with pytest.raises(UsageError, match="choose exactly one of --mxfp4, --mxfp4-w4a4, --fp8"):
        core_quant.for_switches({"--mxfp4", "--fp8"})


def test_validate_reads_the_scheme_table():
    """validate's acceptance-only decision: the recognised scheme's format probe, not strings in
    the config (a GPTQ config naming no speckit scheme is not taken for FP8 or FP4)."""
    import importlib

    val = importlib.import_module("speckit.validate.analysis")
    for s in core_quant.SCHEMES.values():
        why = val.emulated_quant({"quantization_config": s.quantization_config(["lm_head"])})
        native = probe_kernel(s.capability).status == "native"  # the same cached probe
        assert (why is None) == native, (s.name, why)
        if why:
            assert why.startswith(s.capability.upper())
    assert val.emulated_quant({"quantization_config": {"quant_method": "gptq",
                                                       "note": "fp4 fp8"}}) is None


def test_native_compute_reads_the_entry_not_the_name(monkeypatch):
    """plan's step model asks the entry whether its GEMM runs in low precision on a native part:
    W8A8 FP8 and MXFP4 do, W4A16 NVFP4 (either layout) dequantizes even on a B200."""
    from dataclasses import replace

    from speckit.core.plan.formats import native_compute

    b200, h200, mi355 = builtin_gpu("b200"), builtin_gpu("h200"), builtin_gpu("mi355x")
    assert native_compute(h200, "fp8-ct") and native_compute(mi355, "mxfp4")
    assert not native_compute(b200, "nvfp4") and not native_compute(b200, "nvfp4-modelopt")
    assert not native_compute(h200, "mxfp4")  # emulated there
    s = core_quant.SCHEMES["nvfp4"]
    monkeypatch.setitem(core_quant.SCHEMES, "nvfp4", replace(s, native_matmul=True))
    assert native_compute(b200, "nvfp4") and not native_compute(h200, "nvfp4")
