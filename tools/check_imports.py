"""Check that every js distribution imports only what its pyproject declares, and declares
only what it imports: the folder tree is the dependency graph.

Usage: python tools/check_imports.py [--root DIR]

Reads every ``.py`` under ``packages/*/src`` as text (nothing is imported) and collects each
import with ``ast``: module-level and function-level ``import``/``from ... import``, and
``importlib.import_module("...")`` / ``__import__("...")`` called with a literal name, and the
sibling version modules that ``js._interface.require`` imports for each entry of a library's
``REQUIRES`` (in its ``_version.py``); a computed name is a problem unless ``COMPUTED`` says
why it stays inside the graph. Each
imported module is mapped to the distribution that provides it (``js.nn`` to js-nn, other
``js.*`` to js-core, ``orbax`` to orbax-checkpoint, the standard library to nothing). It prints
one line per problem, naming the file, line and import, and exits 1, when:

* a distribution imports a js distribution it does not declare (``js.training`` from js-nn);
* a distribution declares a js distribution of its own layer or a higher one (js-core at the
  bottom; js-nn, js-losses and js-optim on js-core only; js-train and js-models on those;
  ``js`` on all);
* a third-party import has no entry in ``dependencies`` (an import guarded by
  ``except ImportError`` may come from ``optional-dependencies`` instead);
* ``dependencies`` or ``optional-dependencies`` name a distribution the code never imports
  (unless ``RUNTIME_ONLY`` says why another library needs it).

Otherwise it prints one line starting with "OK" and exits 0.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The layers of the graph: a distribution may depend only on distributions of lower layers.
LAYERS = {
    "js-core": 0,
    "js-nn": 1,
    "js-losses": 1,
    "js-optim": 1,
    "js-models": 2,
    "js-train": 2,
    "js": 3,
}
# js subpackages and the distribution that ships each; any other ``js.*`` is js-core's.
JS_PACKAGES = {
    "js.nn": "js-nn",
    "js.losses": "js-losses",
    "js.optim": "js-optim",
    "js.training": "js-train",
    "js.models": "js-models",
}
# Third-party top-level modules and the distributions that install them.
THIRD_PARTY = {
    "absl": "absl-py",
    "flatbuffers": "flatbuffers",
    "flax": "flax",
    "grain": "grain",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "matplotlib": "matplotlib",
    "mlflow": "mlflow",
    "numpy": "numpy",
    "optax": "optax",
    "orbax": "orbax-checkpoint",
    "rich": "rich",
    "safetensors": "safetensors",
    "tensorboardX": "tensorboardX",
    "torch": "torch",
    "wandb": "wandb",
}
# Declared without an import, and why: {(distribution, dependency): reason}.
RUNTIME_ONLY = {
    ("js-core", "flatbuffers"): "jax.export needs it to serialize, and jax does not declare it",
}
# Imports of an undeclared js distribution that are known and tracked, not yet removed:
# {(importing distribution, imported distribution): reason}. Keep this empty.
KNOWN: dict[tuple[str, str], str] = {}
# The module js._interface.require imports for each distribution named in REQUIRES.
VERSION_MODULES = {
    "js-core": "js._version",
    "js-nn": "js.nn._version",
    "js-losses": "js.losses._version",
    "js-optim": "js.optim._version",
    "js-train": "js.training._version",
    "js-models": "js.models._version",
}
# Imports whose module name is computed (no literal to check), and why each stays in the graph:
# {file relative to the root: reason}. Any other computed import is a problem.
COMPUTED = {
    "packages/js-core/src/js/_interface.py": "require() imports the version module of each "
    "REQUIRES entry; the entries are checked as imports of the requiring distribution",
    "packages/js-core/src/js/__init__.py": "js.__getattr__ imports js.<name> for a sibling the "
    "user asked for by attribute (from js import optim), so that a missing distribution "
    "raises the install hint; js-core itself never uses it",
    "packages/js-models/src/js/models/_pretrained.py": "from_pretrained imports the family "
    "module js.models.<name> that _registry.py names for a folder: js-models' own modules",
}
COMPUTED_NAME = "<computed name>"
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class Import:
    """One import statement (or literal dynamic import) in a source file."""

    file: Path
    line: int
    module: str
    guarded: bool  # inside a try whose handlers catch ImportError

    def where(self, root: Path) -> str:
        return f"{self.file.relative_to(root)}:{self.line}: import {self.module}"


def normalize(name: str) -> str:
    """A distribution name in its canonical form (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def provider(module: str) -> str | None:
    """The distribution that provides ``module`` (None for the standard library); KeyError
    for a third-party module missing from THIRD_PARTY."""
    top = module.split(".")[0]
    if top == "js":
        return JS_PACKAGES.get(".".join(module.split(".")[:2]), "js-core")
    if top in sys.stdlib_module_names or top == "__future__":
        return None
    return normalize(THIRD_PARTY[top])


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return handler.type is None or any(
        isinstance(kind, ast.Name) and kind.id in _IMPORT_ERRORS for kind in kinds
    )


def _dynamic(node: ast.Call) -> str | None:
    """The literal module name of ``importlib.import_module("m")`` or ``__import__("m")``;
    COMPUTED_NAME when the name is not a literal."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return COMPUTED_NAME


def _required(file: Path, tree: ast.Module) -> list[Import]:
    """The version modules imported at run time for the ``REQUIRES`` of a ``_version.py``."""
    found = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "REQUIRES" for t in targets):
            for dist in ast.literal_eval(node.value):
                found.append(Import(file, node.lineno, VERSION_MODULES[dist], False))
    return found


def imports_of(file: Path) -> list[Import]:
    """Every absolute import in ``file`` (relative ones stay inside the distribution)."""
    tree = ast.parse(file.read_text(), str(file))
    found: list[Import] = _required(file, tree) if file.name == "_version.py" else []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Try):
            inner = guarded or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        if isinstance(node, ast.Import):
            found.extend(Import(file, node.lineno, a.name, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(Import(file, node.lineno, node.module, guarded))
        elif isinstance(node, ast.Call) and (module := _dynamic(node)) is not None:
            found.append(Import(file, node.lineno, module, guarded))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return found


def declared(pyproject: Path) -> tuple[set[str], set[str]]:
    """``(dependencies, optional dependencies)`` of a pyproject, as normalized names."""
    project = tomllib.loads(pyproject.read_text())["project"]
    required = {normalize(_NAME.match(d).group()) for d in project.get("dependencies", [])}
    extras = project.get("optional-dependencies", {}).values()
    optional = {normalize(_NAME.match(d).group()) for deps in extras for d in deps}
    return required, optional


def _layer_problems(dist: str, required: set[str], where: str) -> list[str]:
    return [
        f"{where}: {dist} declares {dep}, which is not below it in the dependency graph "
        f"(js-core; js-nn, js-losses, js-optim; js-train, js-models; js). Fix: remove the "
        "dependency"
        for dep in sorted(required)
        if dep in LAYERS and dist in LAYERS and LAYERS[dep] >= LAYERS[dist]
    ]


def dist_problems(root: Path, package: Path) -> list[str]:
    """Every problem in one distribution ``packages/<dist>``."""
    dist = package.name
    where = str((package / "pyproject.toml").relative_to(root))
    required, optional = declared(package / "pyproject.toml")
    problems = _layer_problems(dist, required, where)
    used: set[str] = set()
    for file in sorted((package / "src").rglob("*.py")):
        for imp in imports_of(file):
            if imp.module == COMPUTED_NAME:
                if str(file.relative_to(root)) not in COMPUTED:
                    problems.append(
                        f"{imp.where(root)}: a computed module name, which this check cannot "
                        "map to a distribution. Fix: import a literal name, or record in "
                        "COMPUTED of tools/check_imports.py why it stays inside the graph"
                    )
                continue
            try:
                target = provider(imp.module)
            except KeyError:
                problems.append(
                    f"{imp.where(root)}: unknown third-party module. Fix: add it to "
                    "THIRD_PARTY in tools/check_imports.py with its distribution"
                )
                continue
            if target is None or target == dist:
                continue
            used.add(target)
            if target in required or (target in LAYERS and (dist, target) in KNOWN):
                continue
            if imp.guarded and target in optional and target not in LAYERS:
                continue
            what = "js distribution" if target in LAYERS else "distribution"
            problems.append(
                f"{imp.where(root)}: {dist} imports the {what} {target}, which its "
                f"pyproject does not declare in dependencies. Fix: "
                + (
                    "import it only through a distribution below"
                    if target in LAYERS
                    else f"add {target} to {where}"
                )
            )
    unused = (required | optional) - used - {dep for d, dep in RUNTIME_ONLY if d == dist}
    if (package / "src").is_dir():  # the metapackage has no code: its dependencies are its point
        problems += [
            f"{where}: {dist} declares {dep}, which its code never imports. Fix: remove it "
            "(or record in RUNTIME_ONLY of tools/check_imports.py why another library needs it)"
            for dep in sorted(unused)
        ]
    return problems


def problems(root: Path) -> list[str]:
    """Every problem in ``root/packages/*``."""
    found = []
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        found += dist_problems(root, pyproject.parent)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    found = problems(args.root.resolve())
    for line in found:
        print(line)
    if found:
        return 1
    print("OK: every distribution imports exactly what its pyproject declares")
    return 0


if __name__ == "__main__":
    sys.exit(main())
