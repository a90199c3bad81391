"""The package's layers: what each part may import (counting imports made inside functions), no
cycles between the top-level folders or between any two modules, and no module outside the engine
writing its state."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from dataclasses import fields
from functools import cache
from pathlib import Path

import pytest

from xdscheduler.sim.engine import Engine
from xdscheduler.sim.jobs import JobRun

PACKAGE = Path(__file__).resolve().parents[1] / "xdscheduler"
# The models, the search, the engine, faults and forecasting: pure, whatever a function imports.
PURE = (
    "costmodel",
    "planner",
    "sim",
    "faults",
    "forecast",
    "network",
    "perception",
    "catalog",
    "scenario",
    "workload",
)
ABOVE = (
    "rl",
    "serving",
    "runtime",
    "live",
    "registry",
    "cli",
    "model_cli",
)  # the pure layers never reach
FORBIDDEN = (
    "ray",
    "torch",
    "torch_geometric",
    "fastapi",
    "uvicorn",
    "starlette",
    "requests",
    "httpx",
    "http.client",
    "urllib.request",
)
# Layers, bottom up: a folder may import only from its own layer or below (docs/architecture.md
# draws them and says why).
LAYERS = [
    # leaves: errors for users, joining a Ray cluster, reading a user's files and arguments, timing,
    # bounded caches
    {"errors", "ray_cluster", "textfile", "yamlfile", "arguments", "schema", "timing", "cache"},
    {"catalog", "scenario", "tenants", "costmodel", "network", "workload", "datamove"},
    {"planner", "forecast", "faults", "perception"},
    {"sim"},
    {"monitor"},  # live state, metrics and views of studies (the board is a Ray actor)
    {"rl"},
    {"serving"},
    {"registry"},
    {"runtime", "live", "report", "sharing"},  # live: the live control plane on Ray
    # the `xds` command (the models' and the search's commands in model_cli) and its entry points
    {"cli", "model_cli", "entry", "__main__"},
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


@cache
def imports(name: str) -> tuple[frozenset[str], frozenset[str]]:
    """(package modules, outside modules) that `name` imports anywhere in its source: at module
    level or inside functions."""
    ours, outside = set(), set()
    for node in ast.walk(ast.parse(modules()[name].read_text())):
        found = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for mod in found:
            if mod.split(".")[0] != "xdscheduler":
                outside.add(mod)
            elif mod in modules():
                ours.update(_with_parents(mod))
    return frozenset(ours - {name}), frozenset(outside)


def _with_parents(mod: str) -> list[str]:
    """Importing a module runs the __init__ of every package above it."""
    parts = mod.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)]


def closure(start: list[str]) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += imports(m)[0]
    return seen


def folder(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "xdscheduler"


@pytest.mark.parametrize("pure", PURE)
def test_pure_layers_reach_no_rl_http_ray_or_torch_even_inside_functions(pure):
    start = [m for m in modules() if folder(m) == pure]
    reached = closure(start)
    above = sorted(m for m in reached if folder(m) in ABOVE)
    assert not above, f"{pure} reaches {above}"
    bad = {m: sorted(o for o in imports(m)[1] if _forbidden(o)) for m in reached}
    assert not {m: b for m, b in bad.items() if b}


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def test_importing_the_pure_layers_loads_none_of_it():
    """In a fresh interpreter, every module of the pure layers imported: nothing above them,
    no Ray, no torch, no HTTP client."""
    names = sorted(m for m in modules() if folder(m) in PURE)
    code = (
        "import importlib, json, sys\n"
        f"for m in {names!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True
        ).stdout
    )
    hits = [
        m for m in loaded if _forbidden(m) or (m.startswith("xdscheduler.") and folder(m) in ABOVE)
    ]
    assert not hits


def test_folders_import_only_their_own_layer_or_below():
    rank = {f: k for k, layer in enumerate(LAYERS) for f in layer}
    assert set(folder(m) for m in modules()) - {"xdscheduler"} <= set(rank), (
        "a new top-level module: place it in LAYERS"
    )
    upward = sorted(
        (m, dep)
        for m in modules()
        for dep in imports(m)[0]
        if folder(m) in rank and folder(dep) in rank and rank[folder(dep)] > rank[folder(m)]
    )
    assert not upward


def runtime_imports(name: str) -> set[str]:
    """The package modules `name` imports when it runs: at module level or inside functions,
    not under `if TYPE_CHECKING:` (annotations only, never executed)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(modules()[name].read_text()))
    return {m for m in found if m in modules() and m != name}


def test_no_cycle_between_modules():
    """Counting every import a module runs, at module level and inside functions: a module
    never reaches itself. (A package's __init__ is left out: importing a module runs those of
    the packages above it, which is not a dependency of the module's code. Imports for type
    checking alone are left out too: the engine's parts name the Engine they serve in their
    annotations.)"""
    from graphlib import CycleError, TopologicalSorter

    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    graph = {name: runtime_imports(name) - packages for name in modules() if name not in packages}
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as err:
        pytest.fail(f"modules import each other: {' -> '.join(err.args[1])}")


def test_the_architecture_page_names_every_layer():
    """docs/architecture.md's layer diagram names every folder of LAYERS, each in its layer's box
    and in the order of the layers."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    diagram = page.split("```mermaid", 1)[1].split("```", 1)[0]
    boxes = re.findall(r'^\s*\w+\["([^"]*)"\]', diagram, flags=re.M)
    named = [{n.strip() for n in re.sub(r"\(.*?\)", "", box).split(",")} for box in boxes]
    assert named == [set(layer) for layer in LAYERS], "the page's diagram and LAYERS differ"


ENGINE_PARTS = (
    "xdscheduler.sim.speeds",
    "xdscheduler.sim.switching",
    "xdscheduler.sim.recording",
)  # the engine's own parts, each in its module
MAX_ENGINE_METHODS = 25  # issue 40: the engine split along its seams stays small


def test_the_engine_keeps_at_most_25_public_methods():
    public = [n for n in vars(Engine) if not n.startswith("_")]
    assert len(public) <= MAX_ENGINE_METHODS, f"{len(public)}: {public}"


def test_the_live_controller_keeps_at_most_25_public_methods():
    """Its own and its JobBook's (the jobs API's in-process book), as a caller sees them."""
    from xdscheduler.live.controller import LiveController

    actor = LiveController.__ray_metadata__.modified_class  # the class under @ray.remote
    public = sorted(
        {
            name
            for cls in actor.__mro__[:-1]
            for name, member in vars(cls).items()
            if not name.startswith("_") and callable(member)
        }
    )
    assert len(public) <= MAX_ENGINE_METHODS, f"{len(public)}: {public}"


def _writes(tree: ast.AST):
    """(object, attribute, line) of every attribute assigned on something other than self."""
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and node.args
        ):
            yield ast.unparse(node.args[0]), "<setattr>", node.lineno
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if isinstance(el, ast.Attribute) and ast.unparse(el.value) not in ("self", "cls"):
                    yield ast.unparse(el.value), el.attr, el.lineno


def test_no_module_outside_the_engine_writes_engine_or_job_state():
    """The engine (and the job record's own methods) change what the event queue depends on;
    every other module goes through their methods."""
    others = {
        f.name
        for p in modules().values()
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.ClassDef) and node.name != "JobRun"
        for f in _annotated(node)
    }
    job_only = {f.name for f in fields(JobRun)} - others
    job_fields = {f.name for f in fields(JobRun)}
    owners = {"xdscheduler.sim.engine", "xdscheduler.sim.jobs", *ENGINE_PARTS}
    engine_names = ("eng", "engine", "twin", "self.eng", "self.engine")
    job_names = ("r", "run", "self.run", "x")  # what the code calls a job's record
    found = [
        f"{name}:{line} {obj}.{attr}"
        for name, path in modules().items()
        if name not in owners
        for obj, attr, line in _writes(ast.parse(path.read_text()))
        if obj in engine_names
        or attr in job_only
        or attr == "<setattr>"
        or (obj in job_names and attr in job_fields)
    ]
    assert not found


class _Field:
    def __init__(self, name: str):
        self.name = name


def _annotated(cls: ast.ClassDef) -> list[_Field]:
    return [
        _Field(n.target.id)
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


def folder_graph() -> dict[tuple[str, str], str]:
    """(folder, folder it imports) -> "module" where any import of it is at module level, else
    "function"."""
    out: dict[tuple[str, str], str] = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [
                    f"{node.module}.{a.name}"
                    if f"{node.module}.{a.name}" in modules()
                    else node.module
                    for a in node.names
                ]
            )
            for mod in mods:
                if mod in modules() and folder(mod) not in (folder(name), "xdscheduler"):
                    key = (folder(name), folder(mod))
                    level = "module" if id(node) in top else "function"
                    out[key] = "module" if "module" in (out.get(key), level) else "function"
    return out


if __name__ == "__main__":  # python -m tests.test_layers: the graph of the top-level folders
    for (a, b), level in sorted(folder_graph().items()):
        print(f"{a:>12} -> {b:<12} {level}")
