"""Every bad input of issue 12 (points 3, 5, 8) that concerns reading: exit != 0, an `error:` line
naming the file and the field, a `hint:` line, no traceback; a FIFO never blocks.

Through click's CliRunner, and through a real `speckit` process where a hang would matter.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from speckit.cli import main
from tests.support import factories as F


def _config(d: Path) -> dict:
    return json.loads((d / "config.json").read_text())


def _set(d: Path, path: str, value) -> None:
    cfg = _config(d)
    *parents, key = path.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[key] = value
    (d / "config.json").write_text(json.dumps(cfg))


def _rewrite_header(d: Path, change) -> None:
    """Apply ``change`` to the parsed header of model.safetensors; the data stays as it was."""
    f = d / "model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    text = change(header)
    hb = (text if isinstance(text, bytes) else json.dumps(header).encode())
    f.write_bytes(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])


def _first_weight(header: dict) -> dict:
    return next(v for k, v in header.items() if k != "__metadata__")


def _dtype_list(h):
    _first_weight(h)["dtype"] = ["BF16"]


def _meta_list(h):
    h["__metadata__"] = ["pt"]


def _meta_values(h):
    h["__metadata__"] = {"format": 1}


def _negative_dim(h):
    _first_weight(h)["shape"][0] = -64


def _fractional_dim(h):
    _first_weight(h)["shape"][0] = 2.5


def _deep_header(h):
    return b"[" * 100_000 + b"]" * 100_000


HEADER_CASES = {  # label: (change, words the error line must hold)
    "header dtype a list": (_dtype_list, ["dtype", "not a dtype name"]),
    "__metadata__ a list": (_meta_list, ["__metadata__", "not an object"]),
    "__metadata__ non-string values": (_meta_values, ["__metadata__['format']", "not a string"]),
    "negative dim in the header": (_negative_dim, ["shape", "-64"]),
    "fractional dim in the header": (_fractional_dim, ["shape", "2.5"]),
    "100k-deep JSON header": (_deep_header, ["nests deeper than 127"]),
}

CONFIG_CASES = {  # label: (dotted field, value, words the error line must hold)
    "string hidden_size": ("transformer_layer_config.hidden_size", "64",
                           ["transformer_layer_config.hidden_size", "'64'", "a string"]),
    "num_hidden_layers -1": ("transformer_layer_config.num_hidden_layers", -1,
                             ["transformer_layer_config.num_hidden_layers is -1", ">= 1"]),
    "negative dim in config": ("transformer_layer_config.intermediate_size", -128,
                               ["intermediate_size is -128"]),
    "fractional dim in config": ("transformer_layer_config.intermediate_size", 2.5,
                                 ["intermediate_size is 2.5", "fractional"]),
    "aux ids a string": ("eagle_aux_hidden_state_layer_ids", "1,4,7",
                         ["eagle_aux_hidden_state_layer_ids", "a list of integers"]),
    "max_position_embeddings a string": ("transformer_layer_config.max_position_embeddings",
                                         "2048", ["max_position_embeddings", "a string"]),
    "num_key_value_heads 0": ("transformer_layer_config.num_key_value_heads", 0,
                              ["num_key_value_heads is 0"]),
}


def _check_refusal(result, *, file: str, words: list[str]) -> None:
    out = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert result.exit_code != 0, out
    assert "Traceback" not in out, out
    assert result.exception is None or isinstance(result.exception, SystemExit), out
    lines = out.splitlines()
    err = next((ln for ln in lines if ln.startswith("error: ")), None)
    assert err is not None, out
    assert file in err, err
    for w in words:
        assert w in err, (w, err)
    assert any(ln.startswith("hint: ") and len(ln) > 8 for ln in lines), out


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return F.make_spec_eagle3(tmp_path_factory.mktemp("clean") / "draft")


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("label", list(HEADER_CASES))
def test_bad_header(tmp_path, clean, label):
    change, words = HEADER_CASES[label]
    d = _copy(clean, tmp_path / "d")
    _rewrite_header(d, change)
    r = CliRunner().invoke(main, ["inspect", str(d)])
    _check_refusal(r, file=str(d / "model.safetensors"), words=words)


@pytest.mark.parametrize("label", list(CONFIG_CASES))
@pytest.mark.parametrize("command", ["inspect", "convert", "quantize"])
def test_bad_config_field(tmp_path, clean, label, command):
    field, value, words = CONFIG_CASES[label]
    d = _copy(clean, tmp_path / "d")
    _set(d, field, value)
    args = {"inspect": ["inspect", str(d)],
            "convert": ["convert", str(d), "-o", str(tmp_path / "out")],
            "quantize": ["quantize", str(d), "--fp8", "-o", str(tmp_path / "out")]}[command]
    r = CliRunner().invoke(main, args)
    _check_refusal(r, file=str(d / "config.json"), words=words)
    assert not (tmp_path / "out").exists()


def test_deep_config(tmp_path, clean):
    d = _copy(clean, tmp_path / "d")
    (d / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    r = CliRunner().invoke(main, ["inspect", str(d)])
    _check_refusal(r, file=str(d / "config.json"), words=["nests deeper than"])


@pytest.mark.parametrize("content,words", [
    (b"[1, 2]", ["not an object"]), (b'{"a": "\xff"}', ["not valid UTF-8"]),
    (b"{not json", ["not valid JSON"])])
def test_config_not_an_object(tmp_path, clean, content, words):
    d = _copy(clean, tmp_path / "d")
    (d / "config.json").write_bytes(content)
    r = CliRunner().invoke(main, ["inspect", str(d)])
    _check_refusal(r, file=str(d / "config.json"), words=words)


def test_config_is_a_directory(tmp_path, clean):
    d = _copy(clean, tmp_path / "d")
    (d / "config.json").unlink()
    (d / "config.json").mkdir()
    r = CliRunner().invoke(main, ["inspect", str(d)])
    _check_refusal(r, file=str(d / "config.json"), words=["config.json is a directory"])


def _speckit(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """A real process (a FIFO hang would block CliRunner's thread forever)."""
    code = "import sys; from speckit.cli import main; sys.argv[0] = 'speckit'; main()"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, check=False)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_fifo_is_refused_without_blocking(tmp_path, clean, name):
    d = _copy(clean, tmp_path / "d")
    (d / name).unlink()
    os.mkfifo(d / name)
    p = _speckit("inspect", str(d), timeout=60)  # hangs forever if the FIFO is opened
    assert p.returncode == 3, p.stderr
    assert f"error: {d / name}:" in p.stderr and "FIFO" in p.stderr, p.stderr
    assert "\nhint: " in p.stderr and "Traceback" not in p.stderr


def test_symlinked_single_file_outside(tmp_path, clean):
    d = _copy(clean, tmp_path / "d")
    outside = tmp_path / "elsewhere.safetensors"
    (d / "model.safetensors").rename(outside)
    (d / "model.safetensors").symlink_to(outside)
    r = CliRunner().invoke(main, ["inspect", str(d)])
    _check_refusal(r, file=str(d / "model.safetensors"), words=["outside the checkpoint"])
    assert "--allow-external-links" in r.output
    ok = CliRunner().invoke(main, ["inspect", str(d), "--allow-external-links"])
    assert ok.exit_code == 0, ok.output
    r = CliRunner().invoke(main, ["convert", str(d), "-o", str(tmp_path / "o")])
    _check_refusal(r, file=str(d / "model.safetensors"), words=["outside the checkpoint"])
    r = CliRunner().invoke(main, ["quantize", str(d), "--fp8", "-o", str(tmp_path / "o")])
    _check_refusal(r, file=str(d / "model.safetensors"), words=["outside the checkpoint"])
    ok = CliRunner().invoke(main, ["quantize", str(d), "--fp8", "-o", str(tmp_path / "o"),
                                   "--allow-external-links"])
    assert ok.exit_code == 0, ok.output


def test_symlink_inside_the_checkpoint_is_fine(tmp_path, clean):
    d = _copy(clean, tmp_path / "d")
    (d / "weights").mkdir()
    (d / "model.safetensors").rename(d / "weights" / "real.safetensors")
    (d / "model.safetensors").symlink_to(d / "weights" / "real.safetensors")
    r = CliRunner().invoke(main, ["inspect", str(d)])
    assert r.exit_code == 0, r.output


def test_quantize_refuses_an_out_of_range_d2t(tmp_path, clean):
    """convert refuses a d2t mapping past the vocabulary; quantize now runs the same check."""
    import torch
    from safetensors.torch import load_file, save_file

    d = _copy(clean, tmp_path / "d")
    tensors = load_file(str(d / "model.safetensors"))
    d2t = tensors["d2t"].clone()
    d2t[-1] = 10_000  # draft id 31 -> target id 10031, beyond the 256-token vocabulary
    tensors["d2t"] = d2t.to(torch.int64)
    save_file(tensors, str(d / "model.safetensors"), metadata={"format": "pt"})
    r = CliRunner().invoke(main, ["quantize", str(d), "--fp8", "-o", str(tmp_path / "o")])
    _check_refusal(r, file=str(d), words=["d2t", "outside [0, 256)"])
    assert not (tmp_path / "o").exists()
