"""The options several commands share, spelled once (as huggingface_hub's CLI defines RepoIdArg,
RevisionOpt and TokenOpt once): the flags, destination and type are fixed here; a command adds
only what differs for it (its help text, a default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click

from speckit.core import methods
from speckit.core.methods.detect import LAYOUT_SPECS

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def json_option(what: str = "the result") -> Decorator:
    return click.option("--json", "json_mode", is_flag=True, help=f"Print {what} as JSON.")


def quiet_option(help: str = "No progress output (results still print).") -> Decorator:
    return click.option("-q", "--quiet", is_flag=True, help=help)


def out_option(help: str, **kw: Any) -> Decorator:
    return click.option("-o", "--out", type=click.Path(file_okay=False), help=help, **kw)


def force_option(help: str) -> Decorator:
    return click.option("--force", is_flag=True, help=help)


def target_option(help: str, **kw: Any) -> Decorator:
    return click.option("-t", "--target", help=help, **kw)


def draft_option(help: str = "Draft checkpoint: directory, registry id or Hub repo.",
                 **kw: Any) -> Decorator:
    return click.option("-d", "--draft", help=help, **kw)


def method_option(help: str = "Speculative method (default: detected from the draft).",
                  **kw: Any) -> Decorator:
    return click.option("-m", "--method", help=help, **kw)


def k_option(help: str, dest: str = "k", **kw: Any) -> Decorator:
    return click.option("-k", "--num-speculative-tokens", dest, help=help, **kw)


def tp_option(help: str = "Tensor parallel size.") -> Decorator:
    return click.option("--tp", "--tensor-parallel-size", "tp", type=int, default=1,
                        show_default=True, help=help)


def engine_arg_option(help: str) -> Decorator:
    return click.option("--engine-arg", "engine_arg", multiple=True, metavar="KEY=VALUE",
                        help=help)


def max_tokens_option(default: int, help: str | None = None) -> Decorator:
    return click.option("--max-tokens", type=int, default=default, show_default=True, help=help)


def seed_option() -> Decorator:
    return click.option("--seed", type=int, default=0, show_default=True)


def device_option() -> Decorator:
    return click.option("--device", type=click.Choice(["cpu", "cuda"]), default=None,
                        help="Default: cuda when available.")


# ---- the method table in help texts and choices ------------------------------------------------

def _join(names: Iterable[str]) -> str:
    return ", ".join(names)


def method_lists() -> dict[str, str]:
    """The lists of method and layout names help texts give, read from speckit.core.methods
    (each command reads them when its module is imported: a method module found there is named
    in every list it belongs to, and no help text spells a method out by hand)."""
    specs = methods.all_specs()
    return {
        "methods": _join(s.name for s in specs),
        "vllm_methods": _join(methods.vllm_method_names()),
        "untrained": _join(s.name for s in specs if not s.has_checkpoint),
        "convertible": _join(methods.convertible_names()),
        "quantizable": _join(s.name for s in specs
                             if s.quantizable is not None and s.runtime_module_name is not None),
        "convert_layouts": _join(layout.name for layout in LAYOUT_SPECS if layout.reader),
        "quantize_layouts": _join(layout.name for layout in LAYOUT_SPECS if layout.quantizable),
    }


def with_method_lists(command: click.Command) -> click.Command:
    """A command whose help (its docstring) names {methods}, {convertible}, ... (method_lists)."""
    command.help = (command.help or "").format_map(method_lists())
    return command
