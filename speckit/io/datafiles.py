"""The files and environment variables core's knowledge is layered from: registry files, the
user GPU catalog, the fitted step and engine costs, and the one reading of ``$XDG_CONFIG_HOME``.
core parses; this module reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from speckit.core import PACKAGE_DIR
from speckit.core import gpus as _gpus
from speckit.core.gpus import GPU
from speckit.core.registry import (
    BUILTIN_NAME,
    PublishedResult,
    Registry,
    layer_registries,
    parse_registry_text,
)
from speckit.core.registry.schema import Entry
from speckit.errors import FormatError, UsageError

if TYPE_CHECKING:
    from speckit.core.plan import engine as _engine
    from speckit.core.plan import steps as _steps

REGISTRY_ENV = "SPECKIT_REGISTRY"  # os.pathsep-separated registry files layered on top
GPUS_ENV = "SPECKIT_GPUS"  # a gpus.toml that replaces the config-dir one
STEP_COSTS_PATH = PACKAGE_DIR / "data" / "step_costs.json"  # fitted by benchmarks/step_costs.py
ENGINE_COSTS_PATH = PACKAGE_DIR / "data" / "engine_costs.json"  # benchmarks/projection_vs_published


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """speckit's config directory: ``$XDG_CONFIG_HOME/speckit``, else ``~/.config/speckit``. A
    relative XDG_CONFIG_HOME is ignored, as the XDG spec says it must be."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "speckit"
    home = env.get("HOME") or str(Path.home())
    return Path(home) / ".config" / "speckit"


# ---- registry ------------------------------------------------------------------------------------

def builtin_registry_path() -> Path:
    """The registry.toml shipped inside the speckit package."""
    return PACKAGE_DIR / BUILTIN_NAME


def user_config_registry(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/speckit/registry.toml`, else `~/.config/speckit/registry.toml`."""
    return config_dir(env) / BUILTIN_NAME


def registry_files(
    *, extra_files: Sequence[Path | str] = (), env: Mapping[str, str] | None = None
) -> list[tuple[Path, bool]]:
    """The files to load, lowest precedence first, each with `required` (must exist)."""
    env = os.environ if env is None else env
    files: list[tuple[Path, bool]] = [(builtin_registry_path(), True)]
    files.append((user_config_registry(env), False))  # optional: most users have none
    for part in env.get(REGISTRY_ENV, "").split(os.pathsep):
        if part.strip():
            files.append((Path(part.strip()).expanduser().absolute(), True))
    files.extend((Path(p).expanduser().absolute(), True) for p in extra_files)
    return files


def load_registry(
    *, extra_files: Sequence[Path | str] = (), env: Mapping[str, str] | None = None
) -> Registry:
    """Load the built-in registry, then the config-dir file, then each $SPECKIT_REGISTRY file,
    then each extra file (--registry); an entry with the same id as an earlier one replaces it."""
    parsed = []
    for path, required in registry_files(extra_files=extra_files, env=env):
        if not path.is_file():
            if required:
                raise UsageError(
                    f"registry file not found: {path}",
                    hint=f"check --registry / ${REGISTRY_ENV} (os.pathsep-separated list of "
                    "files)")
            continue
        parsed.append((str(path), *parse_registry_file(path)))
    return layer_registries(parsed)


def parse_registry_file(path: Path) -> tuple[list[Entry], list[PublishedResult]]:
    """Parse and validate one registry file; FormatError names file, entry and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: cannot read registry file: {e}") from None
    return parse_registry_text(text, origin=str(path))


# ---- GPU catalog ---------------------------------------------------------------------------------

def user_gpu_file(env: Mapping[str, str] | None = None) -> Path | None:
    """``$SPECKIT_GPUS``, else the config dir's gpus.toml when it exists."""
    env = os.environ if env is None else env
    if env.get(GPUS_ENV):
        return Path(env[GPUS_ENV])
    p = config_dir(env) / "gpus.toml"
    return p if p.exists() else None


def load_user_gpus(path: str | os.PathLike) -> list[GPU]:
    """The ``[[gpu]]`` tables of a gpus.toml (speckit.core.gpus.parse_user_gpus reads them)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError as e:
        raise UsageError(f"{p}: GPU file not found",
                         hint=f"check --gpu-file / ${GPUS_ENV}") from e
    except UnicodeDecodeError as e:
        raise FormatError(f"{p}: not valid TOML ({e})") from e
    return _gpus.parse_user_gpus(text, origin=str(p))


def catalog(*, gpu_file: str | os.PathLike | None = None) -> list[GPU]:
    """Built-in GPUs plus the user's (``gpu_file``, else $SPECKIT_GPUS / the config dir's)."""
    extra = gpu_file if gpu_file is not None else user_gpu_file()
    return _gpus.catalog(extra=load_user_gpus(extra) if extra is not None else ())


def get_gpu(name: str, *, gpu_file: str | os.PathLike | None = None) -> GPU:
    """A GPU by name or alias from the built-in and user catalog; unknown names list it."""
    return _gpus.find_gpu(name, catalog(gpu_file=gpu_file))


# ---- fitted costs --------------------------------------------------------------------------------

def _json_or_none(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FormatError(f"{path}: not valid JSON ({e})") from e


def load_step_constants(path: str | os.PathLike | None = None) -> _steps.StepConstants:
    """The fitted step constants shipped with speckit, or a file bench --write-constants or
    calibrate wrote; the unfitted defaults when the shipped file is absent."""
    p = Path(path) if path is not None else STEP_COSTS_PATH
    raw = _json_or_none(p)
    from speckit.core.plan import steps as _steps

    return _steps.StepConstants() if raw is None else _steps.constants_from(raw, where=str(p))


def save_step_constants(c: _steps.StepConstants, path: Path, *, extra: dict | None = None) -> None:
    from speckit.core.plan import steps as _steps

    Path(path).write_text(json.dumps(_steps.constants_document(c, extra=extra), indent=2) + "\n")


def load_engine_costs(path: str | os.PathLike | None = None, *,
                      engine: str = "vllm") -> _engine.EngineCosts:
    """The fitted terms of one serving engine shipped with speckit (the same on every GPU):
    ideal where the file is absent."""
    p = Path(path) if path is not None else ENGINE_COSTS_PATH
    raw = _json_or_none(p)
    from speckit.core.plan import engine as _engine

    return _engine.IDEAL if raw is None else _engine.engine_from(raw, where=str(p), engine=engine)


def save_engine_costs(e: _engine.EngineCosts, path: Path, *, extra: dict | None = None) -> None:
    from speckit.core.plan import engine as _engine

    Path(path).write_text(json.dumps(_engine.engine_document(e, extra=extra), indent=2) + "\n")
