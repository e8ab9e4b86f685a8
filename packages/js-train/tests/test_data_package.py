"""js.training.data is a leaf of js.training: its modules import no other js.training module
(lazy and TYPE_CHECKING imports included) and no circle among themselves."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import js.training.data

DATA = Path(js.training.data.__file__).parent


def _imports(path: Path) -> set[str]:
    """The js.training modules ``path`` imports anywhere in its body, as dotted names."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ["js", "training", "data"][: 4 - node.level]
            found.add(".".join(base + ([node.module] if node.module else [])))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("js.training"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("js.training"))
    return found


def test_the_data_modules_import_only_each_other_and_form_no_circle():
    graph = {}
    for path in sorted(DATA.glob("*.py")):
        name = "js.training.data" + ("" if path.stem == "__init__" else f".{path.stem}")
        graph[name] = _imports(path)
    outside = {name: deps - set(graph) for name, deps in graph.items() if deps - set(graph)}
    assert outside == {}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as error:
        raise AssertionError(f"an import circle in js.training.data: {error.args[1]}") from None
    assert order.index("js.training.data._grain") < order.index("js.training.data._rows")
