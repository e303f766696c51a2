"""The source files a run executes, found from the imports, and one digest of them.

The workflow lists them per job as its code fingerprints (fedsim.planning.jobs), so that an edit
reruns the runs whose code it changes; a checkpoint (fedsim.core.checkpoint) holds their digest, so
that a run resumes only under the code that saved it. No torch: the planning reads this at every
snakemake call.
"""

from __future__ import annotations

import ast
import hashlib
import os
from functools import cache
from pathlib import Path

from ..methods import PLUGIN_METHOD_FILES, USES
from ..specs import MODELS_DIR, model_files

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def _module_file(package_dir, dotted):
    """src/fedsim/<dotted name as a path>.py or that package's __init__.py; None if neither exists."""
    base = package_dir.joinpath(*dotted.split(".")) if dotted else package_dir
    candidates = [base.with_suffix(".py"), base / "__init__.py"] if dotted else [base / "__init__.py"]
    return next((path for path in candidates if path.is_file()), None)


_IMPORTS = {}  # (file, its mtime and size, module) -> the names it imports: each file version parsed once


def _imported(package_dir, dotted):
    """The fedsim modules (dotted names) one module imports, at any depth of its code (a lazy
    import inside a function is code the job runs too). A file's parse is remembered per version
    (path, mtime, size), so the entry sets of one workflow parse each module once; which of the
    names are modules is checked every time."""
    path = _module_file(package_dir, dotted)
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, dotted)
    if key not in _IMPORTS:
        _IMPORTS[key] = _import_names(dotted, path)
    return {m for m in _IMPORTS[key] if _module_file(package_dir, m)}


def _import_names(dotted, path):
    """Every dotted name under fedsim that a module's imports may name: `from X import a` names X
    and X.a (a submodule, or only a name in X: the caller keeps those that are files)."""
    parts = dotted.split(".") if dotted else []
    package = parts if path.name == "__init__.py" else parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "fedsim":
            base = node.module.split(".")[1:]
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[1:]) for a in node.names if a.name.split(".")[0] == "fedsim"}
            continue
        else:
            continue
        found.add(".".join(base))
        found |= {".".join([*base, a.name]) for a in node.names}
    return frozenset(found)


def package_code(package_dir, *entries):
    """The package's source files a job running the modules `entries` executes: each one, what it
    imports, transitively, and the packages' __init__.py on the way. Derived from the imports, so a
    refactor cannot silently stop (or start) reruns. Empty where the workflow's checkout has no
    src/ (the package installed elsewhere). The methods' registry finds the method modules at run
    time, so no import names them: train_code adds the run's own."""
    package_dir = Path(package_dir)
    if not package_dir.is_dir():
        return []
    seen, todo = set(), list(entries)
    while todo:
        dotted = todo.pop()
        if dotted in seen:
            continue
        seen.add(dotted)
        parts = dotted.split(".")
        todo += [".".join(parts[:i]) for i in range(len(parts))]  # its packages' __init__ run first
        todo += sorted(_imported(package_dir, dotted))
    return sorted(os.path.relpath(_module_file(package_dir, m)) for m in seen)  # relative to the cwd


def method_entries(method: str) -> tuple[list[str], dict[str, Path]]:
    """A method's code: the fedsim modules it is in (fedsim.methods.USES: its own and those it builds on, no
    other method's), as dotted names, and the plugin files among them by name (FEDSIM_PLUGINS)."""
    uses = sorted(USES[method])
    return ([f"methods.{m}" for m in uses if m not in PLUGIN_METHOD_FILES],
            {m: PLUGIN_METHOD_FILES[m] for m in uses if m in PLUGIN_METHOD_FILES})


def model_entries(paths) -> tuple[list[str], list[Path]]:
    """Model files as fedsim's own modules (dotted names) and the files of a user's own (FEDSIM_PLUGINS)."""
    ours = [path for path in paths if path.parent.resolve() == MODELS_DIR.resolve()]
    return [f"models.{path.stem}" for path in ours], [path for path in paths if path not in ours]


@cache
def run_code_digest(method: str) -> str:
    """sha256 of the code a run of `method` executes, as (path in its package or plugin folder, content):
    the round loop and what it imports, the method's modules and every model's (which one trains is the
    dataset file's to say). The same code in another checkout or folder gives the same digest."""
    methods, method_plugins = method_entries(method)
    models, model_plugins = model_entries(model_files())
    ours = [Path(path).resolve() for path in package_code(PACKAGE_DIR, "core.train", *methods, *models)]
    files = sorted({(str(path.relative_to(PACKAGE_DIR)), path) for path in ours} |
                   {(path.name, path) for path in [*method_plugins.values(), *model_plugins]})
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(f"{name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return digest.hexdigest()
