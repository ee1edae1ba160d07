"""The library API: every operation the `speckit` command has, as a plain function returning the
result object its `--json` prints, resolved lazily so that importing this module (and `speckit
--help`) stays fast.

    import speckit.api as sk
    sk.fetch("smollm2-135m-eagle3", local_dir="./draft")   # speckit fetch ... -o ./draft
    sk.inspect("./draft", target="qwen3-8b")                 # speckit inspect ... --target ...
    sk.plan(draft="smollm2-135m-eagle3", gpu="mi300x")       # speckit plan ...
    sk.registry_resolve("qwen3-8b", gpu="mi300x")            # speckit registry resolve ...

A subcommand's function is named by its path: `speckit registry list` is sk.registry_list,
`speckit train eagle3` sk.train_eagle3, `speckit inspect --traffic` sk.inspect_traffic, `speckit
bench --fit-profile` sk.fit_bench_profile. They live here rather than on the `speckit` package
itself because speckit.convert, .fetch, .inspect, .plan and .validate are the operation packages:
one name, one meaning. tests/cli/test_api_parity.py checks that each CLI command prints what its
function here returns.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> (module, attribute); the CLI command each one backs is in the comment
_API = {
    "registry_list": ("speckit.registry", "registry_list"),  # registry list
    "registry_show": ("speckit.registry", "registry_show"),  # registry show
    "registry_resolve": ("speckit.registry", "registry_resolve"),  # registry resolve
    "registry_add": ("speckit.registry", "registry_add"),  # registry add
    "fetch": ("speckit.fetch", "fetch"),
    "inspect": ("speckit.inspect", "inspect"),
    "inspect_traffic": ("speckit.inspect", "inspect_traffic"),  # inspect --traffic
    "convert": ("speckit.convert", "convert"),
    "quantize": ("speckit.quant", "quantize"),
    "plan": ("speckit.plan", "plan"),
    "validate": ("speckit.validate", "validate"),
    "ValidateOptions": ("speckit.validate", "ValidateOptions"),
    "bench": ("speckit.bench", "bench"),
    "BenchOptions": ("speckit.bench", "BenchOptions"),
    "fit_bench_profile": ("speckit.bench.profile", "fit_bench_profile"),  # bench --fit-profile
    "calibrate": ("speckit.calibrate", "calibrate"),
    "train_eagle3": ("speckit.train.eagle3", "train_eagle3"),  # train eagle3
    "Eagle3Options": ("speckit.train.options", "Eagle3Options"),
    "train_dflash": ("speckit.train.dflash", "train_dflash"),  # train dflash
    "DflashOptions": ("speckit.train.options", "DflashOptions"),
    "push": ("speckit.push", "push"),
    "doctor": ("speckit.doctor", "doctor"),
    "demo": ("speckit.demo", "run_demo"),
    "Checkpoint": ("speckit.io.checkpoint", "Checkpoint"),
    "SpeckitError": ("speckit.errors", "SpeckitError"),
}

# the names exist through __getattr__ below
__all__ = ["BenchOptions", "Checkpoint", "DflashOptions", "Eagle3Options",  # noqa: F822
           "SpeckitError", "ValidateOptions", "bench", "calibrate", "convert", "demo", "doctor",
           "fetch", "fit_bench_profile", "inspect", "inspect_traffic", "plan", "push",
           "quantize", "registry_add", "registry_list", "registry_resolve", "registry_show",
           "train_dflash", "train_eagle3", "validate"]


def __getattr__(name: str) -> Any:
    if name in _API:
        module, attr = _API[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'speckit.api' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
