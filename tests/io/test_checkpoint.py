"""Checkpoint: the header-only index (single file, sharded, pickle) refuses every lie it can see,
and the streaming writer produces safetensors that the reference reader reads back bit for bit."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from speckit.errors import FormatError, UsageError
from speckit.io.checkpoint import (
    INDEX_NAME,
    Checkpoint,
    read_ints,
    read_safetensors_header,
    safe_relpath,
    write_json,
)
from speckit.io.writer import CheckpointWriter
from tests.support import factories as F


def _cfg(path: Path) -> None:
    (path / "config.json").write_text(json.dumps({"architectures": ["X"]}))


def _raw_safetensors(path: Path, header: dict, data: bytes) -> None:
    """Write a safetensors file with a hand-made (possibly lying) header."""
    hb = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(hb)) + hb + data)


# ---- opening ------------------------------------------------------------------------------------

def test_single_file_headers_without_loading(tmp_path):
    p = F.make_spec_eagle3(tmp_path / "d")
    ckpt = Checkpoint.open(p)
    assert ckpt.format == "safetensors"
    assert ckpt.files == ["model.safetensors"]
    assert ckpt.metadata == {"format": "pt"}
    fc = ckpt.tensors["fc.weight"]
    assert (fc.dtype, fc.shape, fc.file) == ("BF16", (64, 192), "model.safetensors")
    assert fc.nbytes == 64 * 192 * 2
    assert ckpt.tensors["d2t"].dtype == "I64" and ckpt.tensors["t2d"].dtype == "BOOL"
    assert ckpt.float_dtype() == "BF16"
    assert ckpt.num_params == sum(t.numel for t in ckpt.tensors.values())
    with safe_open(str(p / "model.safetensors"), framework="pt") as f:
        assert torch.equal(ckpt.get("fc.weight"), f.get_tensor("fc.weight"))
    assert "fc.weight" in ckpt and "nope" not in ckpt
    with pytest.raises(FormatError, match="no tensor named 'nope'"):
        ckpt.get("nope")


def test_sharded_index(tmp_path):
    p = F.make_native_mtp(tmp_path / "mtp")
    ckpt = Checkpoint.open(p)
    index = json.loads((p / INDEX_NAME).read_text())["weight_map"]
    assert len(ckpt.files) == 2
    assert set(ckpt.tensors) == set(index)
    assert all(ckpt.tensors[n].file == f for n, f in index.items())
    assert ckpt.tensors["mtp.fc.weight"].file == "model-00002-of-00002.safetensors"
    # iter_tensors opens each shard once and yields every tensor asked for, values intact
    names = ["mtp.fc.weight", "model.norm.weight", "lm_head.weight"]
    got = dict(ckpt.iter_tensors(names))
    assert set(got) == set(names)
    runs = [ckpt.tensors[n].file for n in got]
    runs = [f for i, f in enumerate(runs) if i == 0 or runs[i - 1] != f]
    assert len(runs) == len(set(runs))  # grouped by shard
    for n in names:
        with safe_open(str(p / index[n]), framework="pt") as f:
            assert torch.equal(got[n], f.get_tensor(n))


def test_sharded_without_index_refuses_duplicates(tmp_path):
    _cfg(tmp_path)
    save_file({"a": torch.zeros(2)}, str(tmp_path / "one.safetensors"))
    save_file({"a": torch.ones(2)}, str(tmp_path / "two.safetensors"))
    with pytest.raises(FormatError, match="'a' appears in both one.safetensors and two"):
        Checkpoint.open(tmp_path)


@pytest.mark.parametrize("bad", ["../evil.safetensors", "/etc/passwd", "sub/../../x.safetensors",
                                 "..\\evil.safetensors"])
def test_weight_map_path_traversal_refused(tmp_path, bad):
    d = tmp_path / "ckpt"
    d.mkdir()
    _cfg(d)
    save_file({"a": torch.zeros(2)}, str(tmp_path / "evil.safetensors"))
    (d / INDEX_NAME).write_text(json.dumps({"weight_map": {"a": bad}}))
    with pytest.raises(FormatError, match="weight_map names"):
        Checkpoint.open(d)


def test_symlink_out_of_the_directory_refused(tmp_path):
    outside = tmp_path / "outside.safetensors"
    save_file({"a": torch.zeros(2)}, str(outside))
    d = tmp_path / "ckpt"
    d.mkdir()
    _cfg(d)
    os.symlink(outside, d / "model-1.safetensors")
    (d / INDEX_NAME).write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))
    with pytest.raises(FormatError, match="resolves outside"):
        Checkpoint.open(d)
    assert safe_relpath(d, "model-x.safetensors", what="t") == (d / "model-x.safetensors").resolve()


def test_index_and_shards_must_agree(tmp_path):
    _cfg(tmp_path)
    save_file({"a": torch.zeros(2), "b": torch.zeros(2)}, str(tmp_path / "s1.safetensors"))
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": {"a": "s1.safetensors",
                                                                  "c": "s1.safetensors"}}))
    with pytest.raises(FormatError, match="puts 'c' in s1.safetensors, whose header"):
        Checkpoint.open(tmp_path)
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": {"a": "s1.safetensors"}}))
    with pytest.raises(FormatError, match="holds tensors the index does not list: b"):
        Checkpoint.open(tmp_path)
    (tmp_path / INDEX_NAME).write_text(json.dumps({"weight_map": {"a": "s2.safetensors"}}))
    with pytest.raises(FormatError, match="names 's2.safetensors', which does not exist"):
        Checkpoint.open(tmp_path)
    for bad in ("{not json", "[]", '{"weight_map": []}', '{"weight_map": {"a": 5}}',
                '{"weight_map": {"a": null}}'):
        (tmp_path / INDEX_NAME).write_text(bad)
        with pytest.raises(FormatError, match="not a valid safetensors index|index is not valid"):
            Checkpoint.open(tmp_path)


def test_truncated_file(tmp_path):
    p = F.make_spec_eagle3(tmp_path / "d")
    f = p / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[:-100])  # data section cut short
    with pytest.raises(FormatError, match="end at data byte .* the data section has") as e:
        Checkpoint.open(p)
    assert "model.safetensors" in str(e.value) and "re-fetch" in e.value.hint
    f.write_bytes(data[:200])  # header cut short
    with pytest.raises(FormatError, match="exceeds the file size"):
        Checkpoint.open(p)
    f.write_bytes(data[:5])
    with pytest.raises(FormatError, match="too short to be safetensors"):
        Checkpoint.open(p)


def test_header_offsets_that_lie(tmp_path):
    _cfg(tmp_path)
    # F32 [4] needs 16 bytes; the header claims 12
    _raw_safetensors(tmp_path / "model.safetensors",
                     {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, bytes(16))
    with pytest.raises(FormatError, match=r"\[0, 12\] hold 12 bytes but F32\[4\] needs 16"):
        Checkpoint.open(tmp_path)
    _raw_safetensors(tmp_path / "model.safetensors",
                     {"a": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}, bytes(16))
    with pytest.raises(FormatError, match=r"'a': data_offsets \[8, 24\] leaves a gap"):
        Checkpoint.open(tmp_path)
    _raw_safetensors(tmp_path / "model.safetensors",
                     {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(24))
    with pytest.raises(FormatError, match="8 bytes follow the last tensor"):
        Checkpoint.open(tmp_path)
    _raw_safetensors(tmp_path / "model.safetensors",
                     {"a": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 16]}}, bytes(16))
    with pytest.raises(FormatError, match="unknown dtype 'Q9'"):
        Checkpoint.open(tmp_path)
    _raw_safetensors(tmp_path / "model.safetensors", {"a": {"dtype": "F32"}}, bytes(16))
    with pytest.raises(FormatError, match="tensor 'a': entry has no 'shape'"):
        Checkpoint.open(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 4) + b"{x!}")
    with pytest.raises(FormatError, match="header is not valid JSON"):
        Checkpoint.open(tmp_path)


def test_overlapping_tensors(tmp_path):
    _cfg(tmp_path)
    _raw_safetensors(tmp_path / "model.safetensors",
                     {"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                      "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(16))
    with pytest.raises(FormatError, match="tensor 'b': data_offsets .* overlaps 'a'"):
        Checkpoint.open(tmp_path)


def test_missing_config_and_no_weights(tmp_path):
    save_file({"a": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(FormatError, match="no config.json"):
        Checkpoint.open(tmp_path)
    assert Checkpoint.open(tmp_path, require_config=False).config == {}
    (tmp_path / "model.safetensors").unlink()
    _cfg(tmp_path)
    with pytest.raises(FormatError, match="no weights found"):
        Checkpoint.open(tmp_path)
    with pytest.raises(UsageError, match="not a directory"):
        Checkpoint.open(tmp_path / "config.json")


# ---- pickles -------------------------------------------------------------------------------------

def test_pickles_refused_without_allow_pickle(tmp_path):
    p = F.make_safeailab_eagle3(tmp_path / "s")
    with pytest.raises(FormatError, match="only in pickle files") as e:
        Checkpoint.open(p)
    assert "--allow-pickle" in e.value.hint


def test_pickles_loaded_with_weights_only(tmp_path, monkeypatch):
    p = F.make_safeailab_eagle3(tmp_path / "s")
    seen = {}
    real_load = torch.load

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    ckpt = Checkpoint.open(p, allow_pickle=True)
    assert seen.get("weights_only") is True
    assert ckpt.format == "pickle" and ckpt.files == ["pytorch_model.bin"]
    assert ckpt.tensors["fc.weight"].dtype == "F16"
    assert ckpt.tensors["fc.weight"].shape == (64, 192)
    ref = real_load(p / "pytorch_model.bin", weights_only=True)
    assert torch.equal(ckpt.get("d2t"), ref["d2t"])
    assert dict(ckpt.iter_tensors(["t2d"]))["t2d"].dtype == torch.bool


def test_pickle_with_non_tensor_object_refused(tmp_path):
    p = F.make_pickle_with_object(tmp_path / "obj", kind="object")
    with pytest.raises(FormatError) as e:
        Checkpoint.open(p, allow_pickle=True)
    msg = str(e.value)
    assert "pytorch_model.bin" in msg and "weights_only=True" in msg
    assert "_TrainingArgs" in msg  # names the class it refused to build
    assert "\x1b[" not in msg  # no terminal escape codes from torch's message
    p = F.make_pickle_with_object(tmp_path / "int", kind="int")
    with pytest.raises(FormatError, match="entry 'global_step' is not a tensor"):
        Checkpoint.open(p, allow_pickle=True)


def test_training_state_pickles_are_ignored(tmp_path):
    p = F.make_spec_eagle3(tmp_path / "d")
    torch.save({"step": 1}, p / "optimizer_state_dict.bin")
    assert Checkpoint.open(p).files == ["model.safetensors"]


# ---- writing ------------------------------------------------------------------------------------

def _tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a.weight": torch.randn(8, 16, generator=g).to(torch.bfloat16),
        "b.weight": torch.randn(33, generator=g),
        "d2t": torch.arange(5, dtype=torch.int64),
        "t2d": torch.rand(7, generator=g) > 0.5,
        "fp8": torch.randn(4, 4, generator=g).to(torch.float8_e4m3fn),
        "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(3.5),
        "c.weight": torch.randn(3, 5, generator=g).to(torch.float16),
    }


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())


def test_writer_round_trip_several_shards(tmp_path):
    from speckit.core.dtypes import torch_to_code

    tensors = _tensors()
    specs = [(n, torch_to_code(t.dtype), tuple(t.shape)) for n, t in tensors.items()]
    w = CheckpointWriter(tmp_path, specs, max_shard_bytes=200, metadata={"speckit": "test"})
    assert len(w.files) > 2
    for name in reversed(list(tensors)):  # any order
        w.write(name, tensors[name])
    files = w.close()
    assert INDEX_NAME in files
    index = json.loads((tmp_path / INDEX_NAME).read_text())
    assert set(index["weight_map"]) == set(tensors)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size()
                                                  for t in tensors.values())
    for fname in set(index["weight_map"].values()):
        with safe_open(str(tmp_path / fname), framework="pt") as f:
            assert f.metadata() == {"format": "pt", "speckit": "test"}
            for name in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                got = f.get_tensor(name)
                want = tensors[name]
                assert got.dtype == want.dtype and got.shape == want.shape
                assert _bytes(got) == _bytes(want)
    # and speckit's own reader agrees
    (tmp_path / "config.json").write_text("{}")
    ckpt = Checkpoint.open(tmp_path)
    assert set(ckpt.tensors) == set(tensors)
    assert torch.equal(ckpt.get("d2t"), tensors["d2t"])


def test_writer_page_aligns_copied_tensors_and_keeps_source_shards(tmp_path, monkeypatch):
    """Tensors copied whole from two source files: the header padding puts each output tensor at
    the same offset within a 4 KiB page as in its source (kernel copies run faster), and a new
    shard starts where the source file changes once the shard holds ALIGNED_SHARD_MIN bytes.
    safetensors (Rust) still opens the padded files and reads the right bytes."""
    import speckit.io.writer as ck

    monkeypatch.setattr(ck, "ALIGNED_SHARD_MIN", 10_000)
    a = {"a.big": torch.arange(4000, dtype=torch.int32), "a.small": torch.ones(4)}
    b = {"b.big": torch.arange(6000, dtype=torch.int16), "b.norm": torch.ones(6),
         "b.tiny": torch.zeros(2, dtype=torch.int64)}
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    src = {}
    for fname in ("a.safetensors", "b.safetensors"):
        infos, _ = read_safetensors_header(tmp_path / fname)
        src.update({n: (fname, i.offsets[0]) for n, i in infos.items()})
    tensors = {**a, **b}
    specs = [(n, {torch.int32: "I32", torch.int16: "I16", torch.int64: "I64",
                  torch.float32: "F32"}[t.dtype], tuple(t.shape)) for n, t in tensors.items()]
    out = tmp_path / "out"
    out.mkdir()
    w = CheckpointWriter(out, specs, copied_from=src)
    assert len(w.files) == 2  # split at the source-file change (a.* is over the minimum)
    for n, t in tensors.items():
        w.write(n, t)
    w.close()
    for fname in w.files:
        infos, _ = read_safetensors_header(out / fname)
        for n, info in infos.items():
            if info.nbytes >= 4096:  # the big ones carry the weight of the choice
                assert info.offsets[0] % 4096 == src[n][1] % 4096, n
        with safe_open(str(out / fname), framework="pt") as f:
            for n in f.keys():  # noqa: SIM118
                assert torch.equal(f.get_tensor(n), tensors[n])
    # under the minimum, the source boundary does not split the output
    monkeypatch.setattr(ck, "ALIGNED_SHARD_MIN", 10**9)
    out2 = tmp_path / "out2"
    out2.mkdir()
    assert CheckpointWriter(out2, specs, copied_from=src).files == ["model.safetensors"]


def test_writer_single_file_has_no_index(tmp_path):
    w = CheckpointWriter(tmp_path, [("x", "F32", (3,))])
    w.write("x", torch.ones(3))
    assert w.close() == ["model.safetensors"]
    assert not (tmp_path / INDEX_NAME).exists()
    tensors, meta = read_safetensors_header(tmp_path / "model.safetensors")
    assert meta == {"format": "pt"} and tensors["x"].shape == (3,)


def test_writer_refuses_mistakes(tmp_path):
    with pytest.raises(FormatError, match="duplicate tensor names: x"):
        CheckpointWriter(tmp_path, [("x", "F32", (3,)), ("x", "F32", (3,))])
    w = CheckpointWriter(tmp_path, [("x", "F32", (3,)), ("y", "F32", (2,))])
    with pytest.raises(FormatError, match="'z' was not declared"):
        w.write("z", torch.ones(3))
    with pytest.raises(FormatError, match=r"'x' is BF16\[3\], declared as F32\[3\]"):
        w.write("x", torch.ones(3, dtype=torch.bfloat16))
    with pytest.raises(FormatError, match=r"declared as F32\[3\]"):
        w.write("x", torch.ones(4))
    w.write("x", torch.ones(3))
    with pytest.raises(FormatError, match="written twice"):
        w.write("x", torch.ones(3))
    with pytest.raises(FormatError, match="never written: y"):
        w.close()


def test_writer_as_context_manager_aborts_or_closes(tmp_path):
    """A failure inside the block closes every shard and writes no index; a clean exit closes
    the writer (and refuses a tensor left unwritten) without a close() call."""
    specs = [("a", "F32", (40,)), ("b", "F32", (40,))]
    (tmp_path / "x").mkdir()
    w = CheckpointWriter(tmp_path / "x", specs, max_shard_bytes=200)
    with pytest.raises(RuntimeError, match="boom"), w:
        w.write("a", torch.ones(40))
        raise RuntimeError("boom")
    assert len(w.files) == 2 and not (tmp_path / "x" / INDEX_NAME).exists()
    with pytest.raises(ValueError, match="closed file"):  # both shards were closed
        w.write("b", torch.zeros(40))
    w.abort()  # a second abort is harmless

    (tmp_path / "y").mkdir()
    with CheckpointWriter(tmp_path / "y", specs, max_shard_bytes=200) as w2:
        w2.write("a", torch.ones(40))
        w2.write("b", torch.zeros(40))
    assert (tmp_path / "y" / INDEX_NAME).exists()
    _cfg(tmp_path / "y")
    assert Checkpoint.open(tmp_path / "y").get("b").sum().item() == 0

    (tmp_path / "z").mkdir()
    with pytest.raises(FormatError, match="never written: b"), \
            CheckpointWriter(tmp_path / "z", specs) as w3:
        w3.write("a", torch.ones(40))


def test_writer_copy_range_copies_bytes_and_names_a_short_file(tmp_path):
    src = tmp_path / "src.bin"
    payload = torch.arange(10, dtype=torch.float32)
    src.write_bytes(b"junk" + payload.numpy().tobytes())
    out = tmp_path / "out"
    out.mkdir()
    with CheckpointWriter(out, [("t", "F32", (10,))]) as w:
        w.copy_range("t", src, 4, 40)
    _cfg(out)
    assert torch.equal(Checkpoint.open(out).get("t"), payload)
    (tmp_path / "out2").mkdir()
    w = CheckpointWriter(tmp_path / "out2", [("t", "F32", (10,))])
    with pytest.raises(FormatError, match=r"src.bin: ends inside tensor 't'"):
        w.copy_range("t", src, 8, 40)
    with pytest.raises(FormatError, match="given more than 40 bytes"):
        w.copy_range("t", src, 0, 44)
    w.abort()


def test_read_ints_reads_integer_and_bool_tensors(tmp_path):
    save_file({"d2t": torch.tensor([5, -1, 7], dtype=torch.int64),
               "t2d": torch.tensor([True, False, True]),
               "w": torch.ones(2)}, str(tmp_path / "model.safetensors"))
    _cfg(tmp_path)
    ck = Checkpoint.open(tmp_path)
    assert read_ints(ck, "d2t") == [5, -1, 7] and read_ints(ck, "t2d") == [1, 0, 1]
    with pytest.raises(FormatError, match="'w' is F32, expected an integer or bool tensor"):
        read_ints(ck, "w")


# ---- atomic JSON ------------------------------------------------------------------------------

def test_write_json_atomic(tmp_path):
    p = tmp_path / "x.json"
    write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"a": 1}
    with pytest.raises(TypeError):
        write_json(p, {"a": object()})
    assert json.loads(p.read_text()) == {"a": 1}  # the old file survives a failed write
    assert [q.name for q in tmp_path.iterdir()] == ["x.json"]
