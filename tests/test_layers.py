"""The rooms of src/fedsim and the order they stand in: the import graph has no cycle, no module
imports one from a higher layer, and the modules the workflow reads at every snakemake call
import no torch. Read from the source with `ast`, every import at any depth (a lazy import inside
a function is a dependency too), relative or absolute.

Two kinds of import are not statements and are left out of the graph: a submodule's import runs
its package's __init__ first (fedsim.leaf's imports its builders), and the methods' registry
(fedsim.methods) imports every method module at run time (importlib); the method modules import
the registry, so they stand above it. What importing a module loads (the torch check) does count
the registry's method modules. Likewise the package's lazy attributes: `fedsim.run` imports fedsim.api
by name on first use (fedsim/__init__.py), so `import fedsim` loads no torch (tests/test_api.py runs it).
"""

from __future__ import annotations

import ast
from fnmatch import fnmatch
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Lowest first. A module may import modules of its own layer or of lower ones, never of a higher one.
LAYERS = [
    # helpers that import nothing of fedsim above them; steps: E x ceil(n/B), shared by engine and cost;
    # simd: the vector operations of the compiled loops (the kernel's, and data's checksums); average:
    # the server's weighted average, compiled (the registry's weighted_average calls it); stopping: a
    # signal's stop, which the warm launcher reads before any heavy import; specs: what the models
    # declare and what a dataset file holds, read by the planning without torch
    ("base", ["fedsim", "fedsim.atomic", "fedsim.records", "fedsim.steps", "fedsim.simd", "fedsim.average",
              "fedsim.stopping", "fedsim.specs"]),
    ("registry", ["fedsim.methods"]),
    ("method modules", ["fedsim.methods.*"]),
    ("settings", ["fedsim.settings"]),
    ("data", ["fedsim.data", "fedsim.synthetic", "fedsim.download", "fedsim.leaf", "fedsim.leaf.*",
              "fedsim.partition", "fedsim.arrays"]),
    # the data kinds, one file each: what the config, the planning and `fedsim build-dataset` know of a
    # dataset entry, and its build (which calls the data layer's builders)
    ("kinds", ["fedsim.kinds", "fedsim.kinds.*"]),
    ("numerics", ["fedsim.authors", "fedsim.kernel", "fedsim.shuffle", "fedsim.models", "fedsim.models.*", "fedsim.engine",
                  "fedsim.metrics"]),
    ("run parts", ["fedsim.theory", "fedsim.checkpoint", "fedsim.machine"]),
    ("run", ["fedsim.train"]),
    # How methods look in the figures and where they stand in legends (fedsim.styles): above the run, so a
    # change of colour changes no training job's code fingerprint; below the planning, whose captions
    # name methods in legend order
    ("presentation", ["fedsim.styles"]),
    # The workflow's planning stands above the simulator it plans for: no training code imports it, so
    # editing the cost model or the runs table changes no training job's code fingerprint (fedsim.planning.jobs)
    # and reruns no run. It must not reach down into torch either: TORCH_FREE below.
    ("planning", ["fedsim.planning", "fedsim.planning.*"]),
    # fedsim from Python: a run as `fedsim train` trains it (fedsim.run, reached lazily from the package),
    # with its progress lines (fedsim.planning.progress), as the commands
    ("the run from Python", ["fedsim.api"]),
    ("reports and measurements", ["fedsim.summary", "fedsim.tables", "fedsim.figures", "fedsim.calibration"]),
    ("commands", ["fedsim.cli", "fedsim.warm", "fedsim.__main__"]),
]

# Read at every snakemake call (workflow/rules/common.smk, the Snakefile, and the package itself before
# any of its modules), by the CLI's parser and by the warm launcher before its job runs (stopping): no
# `import torch` in them at any depth, and nothing they import (at any depth) loads torch.
TORCH_FREE = ["fedsim", "fedsim.specs", "fedsim.settings", "fedsim.stopping", "fedsim.kinds", "fedsim.planning",
              "fedsim.planning.kinds",
              "fedsim.planning.experiments", "fedsim.planning.configcheck", "fedsim.planning.jobs", "fedsim.planning.cost",
              "fedsim.planning.progress", "fedsim.planning.rescheduling", "fedsim.planning.captions",
              "fedsim.styles"]


def modules(src: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under src/<package> (a package is its __init__.py)."""
    found = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(tree: ast.Module, top_level: bool):
    """The import statements of a module: all of them, or (top_level) those its import runs, that is
    outside functions and `if TYPE_CHECKING:` blocks."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if top_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if top_level and isinstance(node, ast.If) and _is_type_checking(node):
            todo += node.orelse
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo += list(ast.iter_child_nodes(node))


def imports(name: str, path: Path, known, top_level: bool = False) -> tuple[list[tuple[str, int]], list[int]]:
    """([(imported module of the package, line)], [lines importing torch]) of one module."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    root = name.split(".")[0]
    inside, torch = [], []
    for node in _statements(ast.parse(path.read_text()), top_level):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif node.level:
            base = package[:len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
            targets = [".".join(base + [a.name]) for a in node.names]  # a submodule, or a name in `base`
        else:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        for target in targets:
            if target.split(".")[0] == "torch":
                torch.append(node.lineno)
            elif target.split(".")[0] == root:
                while target and target not in known:  # `from .x import f`: fedsim.x; `from . import x`: fedsim.x
                    target = target.rpartition(".")[0]
                if target and target != name:
                    inside.append((target, node.lineno))
    return inside, torch


def graph(src: Path, top_level: bool = False) -> dict[str, list[tuple[str, int]]]:
    known = modules(src)
    return {name: imports(name, path, known, top_level)[0] for name, path in known.items()}


def find_cycle(edges: dict[str, list[tuple[str, int]]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target, _ in edges.get(node, []):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(name: str) -> int | None:
    matches = [i for i, (_, names) in enumerate(LAYERS) if any(fnmatch(name, pattern) for pattern in names)]
    return max(matches) if matches else None  # fedsim.methods.x: "method modules", not "registry"


FEDSIM = SRC / "fedsim"
EDGES = graph(SRC)


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(EDGES)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_has_a_layer_and_every_layer_entry_a_module():
    missing = [name for name in EDGES if layer_of(name) is None]
    assert not missing, f"modules without a layer (add them to LAYERS): {missing}"
    patterns = [pattern for _, names in LAYERS for pattern in names]
    stale = [p for p in patterns if not any(fnmatch(name, p) for name in EDGES)]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_module_imports_one_from_a_higher_layer():
    upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]}), "
              f"{modules(SRC)[name].relative_to(SRC.parent)}:{line}"
              for name, targets in EDGES.items() for target, line in targets if layer_of(target) > layer_of(name)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_planning_modules_import_no_torch_even_lazily():
    known = modules(SRC)
    direct = {name: imports(name, path, known)[1] for name, path in known.items()}
    found = {name: direct[name] for name in TORCH_FREE if direct[name]}
    assert not found, f"torch imported (module: lines): {found}"
    # ...nor anything whose import loads torch (the registry's import loads every method module)
    runs = graph(SRC, top_level=True)
    runs["fedsim.methods"] += [(name, 0) for name in known if name.startswith("fedsim.methods.")]
    loads = {name for name, path in known.items() if imports(name, path, known, top_level=True)[1]}
    changed = True
    while changed:
        grown = loads | {name for name, targets in runs.items() if any(t in loads for t, _ in targets)}
        changed, loads = grown != loads, grown
    assert loads.isdisjoint(TORCH_FREE), sorted(loads & set(TORCH_FREE))
    reached = {name: sorted({t for t, _ in EDGES[name] if t in loads}) for name in TORCH_FREE}
    found = {name: targets for name, targets in reached.items() if targets}
    assert not found, f"imports of modules that load torch: {found}"


def test_the_checks_see_lazy_imports_and_name_the_cycle(tmp_path):
    """The graph holds a lazy import inside a function, relative and absolute; a cycle through it is found."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text("import os\n\n\ndef f():\n    from .high import g\n")
    (package / "high.py").write_text("from pkg.sub import mid\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "mid.py").write_text("from .. import low\nfrom ..low import f\n")
    edges = graph(tmp_path)
    assert sorted(edges["pkg.low"]) == [("pkg.high", 5)]
    assert sorted(edges["pkg.sub.mid"]) == [("pkg.low", 1), ("pkg.low", 2)]
    cycle = find_cycle(edges)
    assert cycle is not None and len(cycle) == 4 and cycle[0] == cycle[-1]
    assert set(cycle) == {"pkg.low", "pkg.high", "pkg.sub.mid"}
    (package / "low.py").write_text("import os\n")
    assert find_cycle(graph(tmp_path)) is None


@pytest.mark.parametrize("code, top_level, found", [
    ("import torch\n", True, [1]),
    ("def f():\n    import torch.nn\n", False, [2]),
    ("def f():\n    import torch.nn\n", True, []),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n", True, []),
    ("class A:\n    from torch import nn\n", True, [2]),
])
def test_torch_imports_are_found_where_they_run(tmp_path, code, top_level, found):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(code)
    assert imports("pkg.m", tmp_path / "pkg" / "m.py", {"pkg", "pkg.m"}, top_level)[1] == found
