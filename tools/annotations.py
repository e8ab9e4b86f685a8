"""The share of js's public functions that carry full type annotations, read from the source.

Usage: ``python tools/annotations.py [--missing] [--root DIR]``

The public surface of a distribution is what its package ``__init__`` exports: the names in
``__all__`` or, without one, the explicit re-exports (``from ._linear import Linear as Linear``).
Each name is followed through relative imports to its definition with ``ast``, so nothing is
imported and the tool runs without jax. Then:

- a public function counts once;
- a public class counts its public methods, ``__init__`` and ``__call__``, including those it
  inherits from base classes of the same distribution (``Conv2d.forward`` is written on
  ``_ConvNd``); a method overridden in the subclass is not counted a second time;
- a public submodule (``js.nn.functional``, ``js.nn.init``, ``js.training.steps``) counts its own
  public names (its ``__all__``, or the functions and classes it defines without a leading ``_``).

A function is fully annotated when every parameter but a method's ``self``/``cls`` has an
annotation (``*args`` and ``**kwargs`` included) and it declares its return type; ``__init__``
needs no return annotation (it is always ``None``). Each definition is counted once however many
public names reach it. Names imported from another distribution (js-nn re-exports ``js.Module``)
count where they are defined. ``--missing`` lists the functions that are not fully annotated.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGES = {
    "js-core": "src/js",
    "js-nn": "src/js/nn",
    "js-losses": "src/js/losses",
    "js-optim": "src/js/optim",
    "js-train": "src/js/training",
    "js-models": "src/js/models",
}
SPECIAL_METHODS = ("__init__", "__call__")


class Survey:
    """Walks one distribution's public names; ``found`` maps each definition to its verdict."""

    def __init__(self, package: Path):
        self.package = package
        self.found: dict[tuple[Path, int], tuple[str, bool]] = {}
        self._trees: dict[Path, ast.Module] = {}

    def tree(self, path: Path) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        return self._trees[path]

    def module(self, path: Path) -> None:
        """Survey every public name of the module at ``path``."""
        for name in public_names(self.tree(path)):
            self.name(path, name)

    def name(self, path: Path, name: str, depth: int = 0) -> None:
        """Follow ``name`` as bound in the module at ``path`` to its definition and survey it."""
        if depth > 10:  # an import cycle; the real tree has none
            return
        for node in self.tree(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                self.function(path, node, node.name, method=False)
            elif isinstance(node, ast.ClassDef) and node.name == name:
                self.klass(path, node, set())
            elif isinstance(node, ast.ImportFrom) and node.level > 0:
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        self.imported(path, node, alias.name, depth)

    def imported(self, path: Path, node: ast.ImportFrom, name: str, depth: int) -> None:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        parts = node.module.split(".") if node.module else []
        target = resolve(base.joinpath(*parts)) if parts else base / "__init__.py"
        if target is None or not target.is_relative_to(self.package):
            return
        submodule = resolve(target.parent / name) if target.name == "__init__.py" else None
        if submodule is not None and not any(defines(self.tree(target), name)):
            self.module(submodule)  # ``from . import functional``
        else:
            self.name(target, name, depth + 1)

    def klass(self, path: Path, node: ast.ClassDef, seen: set[str]) -> None:
        """Survey a class's public methods, then those it inherits from this distribution."""
        for item in node.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if item.name in seen or not (is_public(item.name) or item.name in SPECIAL_METHODS):
                continue
            seen.add(item.name)
            self.function(path, item, f"{node.name}.{item.name}", method=True)
        for base in node.bases:
            if isinstance(base, ast.Name):
                for found in defines(self.tree(path), base.id):
                    if isinstance(found, ast.ClassDef):
                        self.klass(path, found, seen)

    def function(self, path: Path, node: ast.AST, qualname: str, *, method: bool) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        module = path.relative_to(self.package.parent).with_suffix("").as_posix()
        verdict = fully_annotated(node, method=method)
        self.found.setdefault((path, node.lineno), (f"{module}:{qualname}", verdict))


def resolve(stem: Path) -> Path | None:
    """The file of module ``stem`` (``stem.py`` or ``stem/__init__.py``), or None."""
    if stem.with_suffix(".py").is_file():
        return stem.with_suffix(".py")
    if (stem / "__init__.py").is_file():
        return stem / "__init__.py"
    return None


def defines(tree: ast.Module, name: str) -> list[ast.AST]:
    """The top-level function and class definitions of ``name`` in ``tree``."""
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [node for node in tree.body if isinstance(node, kinds) and node.name == name]


def is_public(name: str) -> bool:
    return not name.startswith("_")


def public_names(tree: ast.Module) -> list[str]:
    """``__all__`` if the module sets it, else its explicit re-exports and public definitions."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    names = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names += [a.asname for a in node.names if a.asname and a.asname == a.name]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
    return [name for name in names if is_public(name)]


def fully_annotated(node: ast.FunctionDef | ast.AsyncFunctionDef, *, method: bool) -> bool:
    args = node.args
    params = [*args.posonlyargs, *args.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    if method and not static and params:
        params = params[1:]  # self or cls
    params += [*args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a is not None)]
    returns = node.returns is not None or (method and node.name == "__init__")
    return returns and all(p.annotation is not None for p in params)


def survey(root: Path) -> dict[str, dict[str, bool]]:
    """Per distribution: each public function's ``module:qualname`` and whether it is annotated."""
    result = {}
    for dist, relative in PACKAGES.items():
        package = root / "packages" / dist / relative
        if not (package / "__init__.py").is_file():
            continue  # a partial tree (the tools' tests)
        walker = Survey(package)
        walker.module(package / "__init__.py")
        result[dist] = dict(sorted(walker.found.values()))
    return result


def share(done: int, total: int) -> str:
    percent = 100.0 * done / total if total else 100.0
    return f"{done}/{total} ({percent:.1f}%)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--missing", action="store_true", help="list what is not annotated")
    options = parser.parse_args(argv)
    result = survey(options.root)
    done = total = 0
    for dist, verdicts in result.items():
        annotated = sum(verdicts.values())
        print(f"annotations: {dist}: {share(annotated, len(verdicts))} fully annotated")
        if options.missing:
            for name, verdict in verdicts.items():
                if not verdict:
                    print(f"  missing: {name}")
        done, total = done + annotated, total + len(verdicts)
    print(f"annotations: overall: {share(done, total)} fully annotated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
