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
  bottom; js-losses and js-optim on js-core only; js-nn on js-core and js-losses; js-train and
  js-models on those; ``js`` on all);
* a third-party import has no entry in ``dependencies`` (an import guarded by
  ``except ImportError`` may come from ``optional-dependencies`` instead);
* ``dependencies`` or ``optional-dependencies`` name a distribution the code never imports
  (unless ``RUNTIME_ONLY`` says why another library needs it);
* modules of one distribution import each other in a circle. Every import counts: at module
  level, inside a function (a lazy import runs later, but the two modules still need each
  other: neither can be read, tested or moved alone), and under ``if TYPE_CHECKING:`` (an
  annotation that needs the other module is an interface that belongs in a leaf module or a
  Protocol). ``from pkg import name`` counts as an import of ``pkg.name`` when that is a module,
  else of ``pkg`` (its ``__init__``); importing ``pkg.mod`` does not count as importing ``pkg``
  itself (Python runs ``pkg/__init__`` first, but it is the parent, already being imported);
* a distribution imports a private module of another one (a dotted name with a component
  starting with ``_``: ``js._checks``, ``from js.nn import _keys``) that the seams table of
  ``docs/versioning.md`` does not list for it, or the table lists a seam or a user that no
  import needs any more. The ``_version`` modules that ``REQUIRES`` names are the interface
  check itself (``js._interface``), not seams;
* a private module of a third-party library (``jax._src``) is imported anywhere but in its
  one seam, ``PRIVATE_HOME`` (js-core's ``js/_jax.py``), tied to that library's pin.

Otherwise it prints one line starting with "OK" and exits 0.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from import_graph import COMPUTED_NAME, Import, circle_problems, imports_of

ROOT = Path(__file__).resolve().parent.parent

# The layers of the graph: a distribution may depend only on distributions of lower layers.
# js-losses is below js-nn: js.nn.functional re-exports the spec's losses from js.losses.
LAYERS = {
    "js-core": 0,
    "js-losses": 1,
    "js-optim": 1,
    "js-nn": 2,
    "js-models": 3,
    "js-train": 3,
    "js": 4,
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
    "jinja2": "jinja2",
    "matplotlib": "matplotlib",
    "mlflow": "mlflow",
    "numpy": "numpy",
    "optax": "optax",
    "PIL": "Pillow",
    "orbax": "orbax-checkpoint",
    "rich": "rich",
    "safetensors": "safetensors",
    "tensorboardX": "tensorboardX",
    "tokenizers": "tokenizers",
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
# Imports whose module name is computed (no literal to check), and why each stays in the graph:
# {file relative to the root: reason}. Any other computed import is a problem.
COMPUTED = {
    "packages/js-core/src/js/_interface.py": "require() imports the version module of each "
    "REQUIRES entry; the entries are checked as imports of the requiring distribution",
    "packages/js-core/src/js/__init__.py": "js.__getattr__ imports js.<name> for a sibling the "
    "user asked for by attribute (from js import optim), so that a missing distribution "
    "raises the install hint; js-core itself never uses it",
    "packages/js-models/src/js/models/_folders.py": "from_pretrained imports the family "
    "module js.models.<name> that _registry.py names for a folder: js-models' own modules",
}
# The one module that may import a third-party library's private modules (jax._src): each use
# is there with its reason, and jax's upper bound in every pyproject is what keeps them valid.
PRIVATE_HOME = "packages/js-core/src/js/_jax.py"
# Where the seams live: the table under this heading in docs/versioning.md.
SEAMS_FILE = "docs/versioning.md"
SEAMS_HEADING = "## Seams"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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


# -------------------------------------------------------------------------------------- seams


@dataclass(frozen=True)
class Seam:
    """One row of the seams table: a private module other distributions may import."""

    module: str
    provider: str
    users: frozenset[str]
    line: int


def seams(root: Path) -> tuple[dict[str, Seam], list[str]]:
    """The seams table of ``docs/versioning.md`` (``| `module` | provider | users | why |``
    under the heading ``## Seams``), and the problems found reading it."""
    path = root / SEAMS_FILE
    if not path.is_file():
        return {}, []
    found: dict[str, Seam] = {}
    problems = []
    inside = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("## "):
            inside = line.startswith(SEAMS_HEADING)
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not inside or not line.startswith("|") or not cells[0].startswith("`"):
            continue
        module = cells[0].strip("`")
        where = f"{SEAMS_FILE}:{number}"
        if len(cells) < 4 or not all(cells[:4]):
            problems.append(
                f"{where}: a seam row needs four cells (module, provider, users, why). Fix: "
                "fill them in"
            )
            continue
        users = frozenset(normalize(u.strip()) for u in cells[2].split(","))
        if provider(module) != cells[1] or cells[1] not in LAYERS:
            problems.append(
                f"{where}: the seam {module} is shipped by {provider(module)}, not "
                f"{cells[1]}. Fix: name its distribution in the second cell"
            )
        found[module] = Seam(module, cells[1], users, number)
    return found, problems


def private_part(imp: Import) -> list[str]:
    """The private modules (or names) ``imp`` reaches: its dotted name up to the first
    component starting with ``_`` (dunders such as ``__version__`` are public)."""

    def private(name: str) -> str | None:
        parts = name.split(".")
        for i, part in enumerate(parts):
            if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
                return ".".join(parts[: i + 1])
        return None

    names = [f"{imp.module}.{n}" for n in imp.names if n != "*"] or [imp.module]
    return sorted({p for n in names if (p := private(n)) is not None})


def seam_problems(
    root: Path,
    dist: str,
    required: set[str],
    imports: list[Import],
    table: dict[str, Seam],
    seen: set,
) -> list[str]:
    """Imports of another js distribution's private modules that the table does not list for
    ``dist``, and of third-party private modules outside PRIVATE_HOME. Every (seam, user)
    imported is added to ``seen``. An import of a js distribution that ``dist`` does not
    declare in ``required`` is reported as that, not here."""
    problems = []
    for imp in imports:
        if imp.kind == "REQUIRES" or imp.module == COMPUTED_NAME:
            continue
        try:
            target = provider(imp.module)
        except KeyError:
            continue
        if target is None or target == dist or target in LAYERS and target not in required:
            continue
        for module in private_part(imp):
            if target not in LAYERS:
                if str(imp.file.relative_to(root)) != PRIVATE_HOME:
                    problems.append(
                        f"{imp.where(root)}: {module} is a private module of {target}. Fix: "
                        f"use it through {PRIVATE_HOME} (its one seam), which says why and "
                        f"which {target} releases it holds for"
                    )
                continue
            seam = table.get(module)
            if seam is not None and dist in seam.users:
                seen.add((module, dist))
                continue
            problems.append(
                f"{imp.where(root)}: {dist} imports {module}, a private module of {target} "
                f"that the seams table of {SEAMS_FILE} does not list for {dist}. Fix: import "
                f"a public name of {target} (or give the shared code a public home); if it "
                f"must stay private, add {dist} to its row, or a row for it, with the reason"
            )
    return problems


def stale_seam_problems(table: dict[str, Seam], seen: set) -> list[str]:
    """Rows or users of the seams table that no import needs any more."""
    problems = []
    for seam in table.values():
        for user in sorted(seam.users):
            if (seam.module, user) not in seen:
                problems.append(
                    f"{SEAMS_FILE}:{seam.line}: the seam {seam.module} lists {user}, which "
                    "never imports it. Fix: remove "
                    + (
                        f"{user} from the row"
                        if any((seam.module, u) in seen for u in seam.users)
                        else "the row (the list of seams stays as short as the design allows)"
                    )
                )
    return problems


def declared(pyproject: Path) -> tuple[set[str], set[str]]:
    """``(dependencies, optional dependencies)`` of a pyproject, as normalized names."""
    project = tomllib.loads(pyproject.read_text())["project"]
    required = {normalize(_NAME.match(d).group()) for d in project.get("dependencies", [])}
    extras = project.get("optional-dependencies", {}).values()
    optional = {normalize(_NAME.match(d).group()) for deps in extras for d in deps}
    return required, optional


_ORDER = "; ".join(
    ", ".join(d for d in LAYERS if LAYERS[d] == layer) for layer in sorted(set(LAYERS.values()))
)


def _layer_problems(dist: str, required: set[str], where: str) -> list[str]:
    return [
        f"{where}: {dist} declares {dep}, which is not below it in the dependency graph "
        f"({_ORDER}). Fix: remove the dependency"
        for dep in sorted(required)
        if dep in LAYERS and dist in LAYERS and LAYERS[dep] >= LAYERS[dist]
    ]


def dist_problems(root: Path, package: Path, table: dict[str, Seam], seen: set) -> list[str]:
    """Every problem in one distribution ``packages/<dist>``: its declarations, its circles,
    and its private imports of siblings against the seams ``table`` (which ``seen`` collects)."""
    dist = package.name
    where = str((package / "pyproject.toml").relative_to(root))
    required, optional = declared(package / "pyproject.toml")
    problems = _layer_problems(dist, required, where)
    used: set[str] = set()
    src = package / "src"
    imports = [imp for file in sorted(src.rglob("*.py")) for imp in imports_of(file, src)]
    for imp in imports:
        if imp.module == COMPUTED_NAME:
            if str(imp.file.relative_to(root)) not in COMPUTED:
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
    if src.is_dir():  # the metapackage has no code: its dependencies are its point
        problems += [
            f"{where}: {dist} declares {dep}, which its code never imports. Fix: remove it "
            "(or record in RUNTIME_ONLY of tools/check_imports.py why another library needs it)"
            for dep in sorted(unused)
        ]
        problems += circle_problems(root, src, dist, imports)
    problems += seam_problems(root, dist, required, imports, table, seen)
    return problems


def problems(root: Path) -> list[str]:
    """Every problem in ``root/packages/*`` and in the seams table of ``root/docs``."""
    table, found = seams(root)
    seen: set = set()
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        found += dist_problems(root, pyproject.parent, table, seen)
    return found + stale_seam_problems(table, seen)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    found = problems(args.root.resolve())
    for line in found:
        print(line)
    if found:
        return 1
    print(
        "OK: every distribution imports exactly what its pyproject declares, no modules import "
        "each other in a circle, and every private import across distributions is a listed seam"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
