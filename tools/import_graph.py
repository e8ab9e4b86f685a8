"""The graph of imports inside the js source tree, read from the files (nothing is imported):
what each file imports (:func:`imports_of`), and the circles among one distribution's modules
(:func:`circle_problems`). ``check_imports.py`` applies the distribution rules on top.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

# The module js._interface.require imports for each distribution named in REQUIRES.
VERSION_MODULES = {
    "js-core": "js._version",
    "js-nn": "js.nn._version",
    "js-losses": "js.losses._version",
    "js-optim": "js.optim._version",
    "js-train": "js.training._version",
    "js-models": "js.models._version",
}
COMPUTED_NAME = "<computed name>"
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}


@dataclass(frozen=True)
class Import:
    """One import statement (or literal dynamic import) in a source file."""

    file: Path
    line: int
    module: str
    guarded: bool  # inside a try whose handlers catch ImportError
    names: tuple[str, ...] = ()  # what ``from module import ...`` takes
    kind: str = "module level"  # or "lazy" (in a function), "TYPE_CHECKING", "REQUIRES"

    def where(self, root: Path) -> str:
        return f"{self.file.relative_to(root)}:{self.line}: import {self.module}"


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
                found.append(
                    Import(file, node.lineno, VERSION_MODULES[dist], False, kind="REQUIRES")
                )
    return found


def module_name(file: Path, src: Path) -> str:
    """The dotted name of the module ``file`` under the source folder ``src``."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    """The absolute module of a ``from`` import."""
    if node.level == 0:
        return node.module
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(file: Path, src: Path) -> list[Import]:
    """Every import in ``file``, relative ones made absolute (``src`` is the source folder
    ``file`` lies under)."""
    tree = ast.parse(file.read_text(), str(file))
    found: list[Import] = _required(file, tree) if file.name == "_version.py" else []
    name = module_name(file, src)
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST, guarded: bool, kind: str) -> None:
        if isinstance(node, ast.Try):
            inner = guarded or any(_catches_import_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, inner, kind)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded, kind)
            return
        if isinstance(node, ast.If) and _is_type_checking(node.test) and kind != "lazy":
            for child in node.body:
                visit(child, guarded, "TYPE_CHECKING")
            for child in node.orelse:
                visit(child, guarded, kind)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            kind = "lazy"
        if isinstance(node, ast.Import):
            found.extend(Import(file, node.lineno, a.name, guarded, (), kind) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (module := _absolute(node, package)):
            names = tuple(a.name for a in node.names)
            found.append(Import(file, node.lineno, module, guarded, names, kind))
        elif isinstance(node, ast.Call) and (module := _dynamic(node)) is not None:
            found.append(Import(file, node.lineno, module, guarded, (), kind))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded, kind)

    visit(tree, False, "module level")
    return found


# ------------------------------------------------------------------------------------ circles


def _targets(imp: Import, modules: set[str]) -> list[str]:
    """The modules of ``modules`` that ``imp`` runs: ``from pkg import name`` runs ``pkg.name``
    when that is a module, else ``pkg``."""
    if not imp.names:
        return [imp.module] if imp.module in modules else []
    found = {
        f"{imp.module}.{n}" if f"{imp.module}.{n}" in modules else imp.module for n in imp.names
    }
    return sorted(found & modules)


def _components(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _shortest_circle(graph: dict[str, dict[str, Import]], members: list[str]) -> list[str]:
    """A shortest circle through the first of ``members``, as its modules in import order."""
    start, inside = members[0], set(members)
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node]):
            if nxt == start:
                return paths[node] + [start]
            if nxt in inside and nxt not in paths:
                paths[nxt] = paths[node] + [nxt]
                queue.append(nxt)
    raise AssertionError(f"{members} is not a circle")


def circle_problems(root: Path, src: Path, dist: str, imports: list[Import]) -> list[str]:
    """One line per circle of imports among the modules of one distribution."""
    modules = {module_name(f, src) for f in src.rglob("*.py")}
    graph: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for imp in imports:
        source = module_name(imp.file, src)
        for target in _targets(imp, modules):
            if target != source:
                graph[source].setdefault(target, imp)
    problems = []
    for members in _components(graph):
        circle = _shortest_circle(graph, members)
        steps = [graph[a][b] for a, b in zip(circle, circle[1:], strict=False)]
        path = " -> ".join(
            [circle[0]]
            + [
                f"{b} ({s.file.name}:{s.line}, {s.kind})"
                for b, s in zip(circle[1:], steps, strict=True)
            ]
        )
        rest = sorted(set(members) - set(circle))
        problems.append(
            f"{steps[0].where(root)}: a circle of imports inside {dist}: {path}"
            + (f"; the same circle also holds {', '.join(rest)}" if rest else "")
            + ". Fix: move what both sides need into a module that imports neither (a leaf), "
            "or give a TYPE_CHECKING import a Protocol of its own"
        )
    return problems
