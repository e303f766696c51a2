"""The rooms of src/fedsim and the order they stand in: the import graph has no cycle, no module
imports one from a higher layer, and the modules the workflow reads at every snakemake call
import no torch. Read from the source with `ast`, every import at any depth (a lazy import inside
a function is a dependency too), relative or absolute.

Two kinds of import are not statements and are left out of the graph: a submodule's import runs
its package's __init__ first (fedsim.data.leaf's imports its builders), and the methods' registry
(fedsim.methods) imports every method module at run time (importlib); the method modules import
the registry, so they stand above it. What importing a module loads (the torch check) does count
the registry's method modules. Likewise the package's lazy attributes: `fedsim.run` imports fedsim.api
by name on first use (fedsim/__init__.py), so `import fedsim` loads no torch (tests/test_api.py runs it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# The layers, lowest first: each folder of src/fedsim is one, and a module may import modules of its
# own folder or of lower ones, never of a higher one. The few modules at the top level stand where
# TOP_LEVEL puts them.
LAYERS = [
    # what every layer reads: the package's lazy attributes, what a model and a kind declare (specs, read by
    # the planning without torch), the compiled loops' vector operations (simd: the kernel's and the data's
    # checksums) and the server's weighted average in fedsim's order (average: the methods' registry calls it)
    ("base", "the top level's helpers"),
    ("methods", "the methods' registry and one file per method: pure functions over explicit state"),
    ("data", "the HDF5 format, its generators and builders, downloads, atomic writes"),
    ("kinds", "the data kinds, one file each: what the config and the planning know of a dataset entry, "
              "and its build (which calls the data layer's builders)"),
    ("models", "one file per model and the model contract"),
    ("core", "the simulator: a run's settings, how it reads its dataset, local SGD, the kernels, metrics, checkpoints, "
              "the round loop"),
    # above the run, so a change of colour changes no training job's code fingerprint; below the planning,
    # whose captions name methods in legend order
    ("outputs", "tables over runs, the figures, how each method looks in them"),
    # The workflow's planning stands above the simulator it plans for: no training code imports it, so
    # editing the cost model or the runs table changes no training job's code fingerprint (fedsim.planning.jobs)
    # and reruns no run. It must not reach down into torch either (TORCH_FREE below; calibration, which
    # measures the cost model's constants with the real models, is the one module of it that imports torch)
    ("planning", "what Snakemake imports at parse time"),
    # fedsim from Python: a run as `fedsim train` trains it, with its progress lines (fedsim.planning.progress)
    ("api", "fedsim from Python"),
    ("commands", "the command line and the warm launcher"),
]
TOP_LEVEL = {"fedsim": "base", "fedsim.specs": "base", "fedsim.simd": "base", "fedsim.average": "base",
             "fedsim.api": "api", "fedsim.cli": "commands", "fedsim.warm": "commands", "fedsim.__main__": "commands"}
MAX_TOP_LEVEL_MODULES = 8

# Read at every snakemake call (workflow/rules/common.smk, the Snakefile, and the package itself before
# any of its modules), by the CLI's parser and by the warm launcher before its job runs (stopping): no
# `import torch` in them at any depth, and nothing they import (at any depth) loads torch.
TORCH_FREE = ["fedsim", "fedsim.specs", "fedsim.core.settings", "fedsim.core.stopping", "fedsim.kinds", "fedsim.planning",
              "fedsim.planning.kinds",
              "fedsim.planning.experiments", "fedsim.planning.configcheck", "fedsim.planning.jobs", "fedsim.planning.cost",
              "fedsim.planning.progress", "fedsim.planning.rescheduling", "fedsim.planning.captions",
              "fedsim.outputs.styles"]


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
    """A module's layer: its folder's (fedsim.core.train: core), or TOP_LEVEL's for a module at the top."""
    layer = TOP_LEVEL.get(name) or (name.split(".")[1] if name.count(".") >= 1 else None)
    names = [layer_name for layer_name, _ in LAYERS]
    return names.index(layer) if layer in names else None


FEDSIM = SRC / "fedsim"
EDGES = graph(SRC)


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(EDGES)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_module_has_a_layer_and_every_folder_is_one():
    missing = [name for name in EDGES if layer_of(name) is None]
    assert not missing, f"modules of no layer (a folder of their own: add it to LAYERS; at the top: TOP_LEVEL): {missing}"
    folders = sorted(p.name for p in FEDSIM.iterdir() if (p / "__init__.py").is_file())
    assert sorted(set(folders) | {"base", "api", "commands"}) == sorted(name for name, _ in LAYERS), folders
    top = sorted(p.stem for p in FEDSIM.glob("*.py"))
    assert sorted(TOP_LEVEL) == sorted(f"fedsim.{stem}" if stem != "__init__" else "fedsim" for stem in top), top
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} modules at the top level of src/fedsim: {top}"


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


# Rooms a person reads top to bottom: no function of src/ longer than this, and the two rooms everyone
# opens first shorter still (the round loop, the command line's parser)
MAX_FUNCTION_LINES = 80
SHORTER = {("fedsim.core.train", "_train"): 60, ("fedsim.cli", "build_parser"): 80}


def test_no_function_is_longer_than_a_room():
    long, lengths = [], {}
    for name, path in modules(SRC).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                lengths[(name, node.name)] = lines
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, "functions longer than a room:\n" + "\n".join(long)
    for where, bound in SHORTER.items():
        assert lengths[where] <= bound, (where, lengths[where])
