"""Library parity (issue 53 item 7): speckit.api has a function for every CLI command, and each
command's `--json` prints what that function returns. Commands that run offline here are run
both ways and compared (paths of separate outputs and wall times aside); for the engine commands
the CLI module is checked to call the API's own function, whose result type is what --json
prints (no engine starts)."""

from __future__ import annotations

import dataclasses
import inspect as pyinspect
import json
import typing
from typing import Any

import pytest
from click.testing import CliRunner

import speckit.api as sk
from speckit.cli import main
from speckit.core.jsonable import to_jsonable
from tests.cli.test_option_table import COMMANDS
from tests.support import factories as F

BUNDLED = "smollm2-135m-eagle3"
# what differs run to run: wall time, and the memory free on the machine (doctor)
TIMES = {"seconds", "elapsed_s", "wall_s", "ram_available_bytes"}


def _cli(*argv: str) -> Any:
    r = CliRunner().invoke(main, [*argv, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _same(x: Any, *, paths: dict[str, str] | None = None) -> Any:
    """``x`` as JSON with wall times dropped and each path of ``paths`` spelled as its key."""
    text = json.dumps(to_jsonable(x))
    for mark, p in (paths or {}).items():
        text = text.replace(str(p), mark)
    return _drop_times(json.loads(text))


def _drop_times(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _drop_times(v) for k, v in x.items() if k not in TIMES}
    if isinstance(x, list):
        return [_drop_times(v) for v in x]
    return x


def test_every_command_has_an_api_function():
    """Each leaf command of the CLI names its function in speckit.api (subcommands by path)."""
    leaves = [c for c, cmd in COMMANDS.items() if c != "speckit" and not hasattr(cmd, "commands")]
    have = set(sk.__all__)
    for c in leaves:
        assert c.replace(" ", "_") in have, c
    for extra in ("inspect_traffic", "fit_bench_profile"):  # inspect --traffic, bench --fit-profile
        assert extra in have


@pytest.mark.parametrize("argv, call", [
    (["registry", "list"], lambda: sk.registry_list()),
    (["registry", "list", "--all"], lambda: sk.registry_list(kind=None)),
    (["registry", "show", BUNDLED], lambda: sk.registry_show(BUNDLED)),
    (["registry", "resolve", "--target", "smollm2-135m-instruct"],
     lambda: sk.registry_resolve("smollm2-135m-instruct")),
    (["inspect", BUNDLED], lambda: sk.inspect(BUNDLED)),
    (["inspect", BUNDLED, "--target", "qwen3-8b"], lambda: sk.inspect(BUNDLED, target="qwen3-8b")),
    (["plan", "-d", BUNDLED], lambda: sk.plan(target=None, draft=BUNDLED)),
    (["plan", "-d", BUNDLED, "--gpu", "mi300x", "--max-model-len", "4096"],
     lambda: sk.plan(target=None, draft=BUNDLED, gpu="mi300x", max_model_len=4096)),
    (["fetch", BUNDLED], lambda: sk.fetch(BUNDLED)),
    (["doctor", "--no-network", "--no-probe"],
     lambda: sk.doctor(check_network=False, probe_kernels=False)),
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_offline_commands_print_what_the_api_returns(offline, argv, call):
    # inspect --target qwen3-8b exits 3 (the pairing is wrong): its JSON still prints
    r = CliRunner().invoke(main, [*argv, "--json"])
    assert r.exit_code in (0, 3), r.output
    assert _same(json.loads(r.stdout)) == _same(call())


def test_fetch_o_prints_what_the_api_returns(offline):
    cli = _cli("fetch", BUNDLED, "-o", "a")
    api = sk.fetch(BUNDLED, local_dir="b")
    assert _same(cli, paths={"OUT": offline / "a"}) == _same(api, paths={"OUT": offline / "b"})


def test_convert_and_quantize_print_what_the_api_returns(offline):
    src, tgt = F.make_spec_eagle3(offline / "src"), F.make_target(offline / "tgt")
    cli = _cli("convert", str(src), "--target", str(tgt), "-o", "c1")
    api = sk.convert(str(src), target=str(tgt), out="c2")
    assert _same(cli, paths={"OUT": offline / "c1"}) == _same(api, paths={"OUT": offline / "c2"})
    cli = _cli("quantize", str(src), "--fp8", "-o", "q1")
    api = sk.quantize(str(src), scheme="fp8", out="q2")
    assert _same(cli, paths={"OUT": offline / "q1"}) == _same(api, paths={"OUT": offline / "q2"})


# engine commands: the CLI module's function is the API's, and what it returns is a result object
ENGINE = {"validate": ("speckit.cli.validate", "validate"),
          "bench": ("speckit.cli.bench", "bench"),
          "fit_bench_profile": ("speckit.cli.bench", "fit_bench_profile"),
          "calibrate": ("speckit.cli.calibrate", "calibrate"),
          "train_eagle3": ("speckit.cli.train", "train_eagle3"),
          "train_dflash": ("speckit.cli.train", "train_dflash"),
          "push": ("speckit.cli.push", "push"),
          "demo": ("speckit.cli.demo", "run_demo"),
          "registry_add": ("speckit.cli.registry", "registry_add")}


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_engine_commands_call_the_api_function_and_return_a_result_object(name):
    import importlib

    module, attr = ENGINE[name]
    fn = getattr(sk, name)
    assert getattr(importlib.import_module(module), attr) is fn  # the CLI calls this function
    ret = typing.get_type_hints(fn)["return"]
    assert dataclasses.is_dataclass(ret), (name, ret)  # --json prints it through to_jsonable
    assert pyinspect.signature(fn).parameters  # a plain function with its options as arguments


def test_inspect_traffic_is_one_result_in_the_api_and_the_cli(offline):
    """inspect --traffic used to join two results in the CLI module; the report now carries
    its traffic part (None without --traffic)."""
    assert sk.inspect(BUNDLED).traffic is None
    assert "traffic" in _cli("inspect", BUNDLED)
