"""The versioning policy of the js monorepo, read from files only (never imports js).

Shared by ``check_versions.py`` and ``bump_version.py``; docs/versioning.md states the policy:

* A library's ``INTERFACE`` changes only with a minor version bump; ``INTERFACE_RELEASES`` maps
  each interface to its first release.
* A consumer C whose ``REQUIRES[P] == (lo, hi)`` declares ``P>=RELEASES[lo],<UPPER`` where
  UPPER is ``RELEASES[hi + 1]`` when P has released interface hi + 1, else the next minor of
  P's current version (0.1.3 -> 0.2).
* The ``js`` metapackage (static version, no code) declares each sibling
  ``>=X.Y.0,<X.(Y+1)`` around that sibling's current version X.Y.Z.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

_VERSION = re.compile(r"^\d+(\.\d+)*$")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*?)\s*$")


class PolicyError(Exception):
    """A file of the packages tree cannot be read the way the policy needs."""


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_version(text: str) -> tuple[int, ...]:
    if not isinstance(text, str) or not _VERSION.match(text):
        raise PolicyError(f"version {text!r} is not a plain release version like '0.1.0'")
    parts = tuple(int(p) for p in text.split("."))
    return parts + (0,) * (3 - len(parts))


def next_minor(version: str) -> str:
    major, minor = parse_version(version)[:2]
    return f"{major}.{minor + 1}"


def minor_floor(version: str) -> str:
    major, minor = parse_version(version)[:2]
    return f"{major}.{minor}.0"


@dataclass(frozen=True)
class Range:
    """``>=low,<high``: the only form a sibling dependency may take."""

    low: str
    high: str

    def __str__(self) -> str:
        return f">={self.low},<{self.high}"

    def same_as(self, other: Range) -> bool:
        return (parse_version(self.low), parse_version(self.high)) == (
            parse_version(other.low),
            parse_version(other.high),
        )

    def contains(self, version: str) -> bool:
        return parse_version(self.low) <= parse_version(version) < parse_version(self.high)

    @classmethod
    def parse(cls, specifier: str) -> Range:
        clauses = [c.strip() for c in specifier.split(",") if c.strip()]
        low = [c[2:].strip() for c in clauses if c.startswith(">=")]
        high = [c[1:].strip() for c in clauses if c.startswith("<") and not c.startswith("<=")]
        if len(clauses) != 2 or len(low) != 1 or len(high) != 1:
            raise PolicyError(
                f"range {specifier!r} is not of the form '>=LOW,<HIGH' (sibling dependencies are "
                f"ranges, never exact pins)"
            )
        parse_version(low[0])
        parse_version(high[0])
        return cls(low[0], high[0])


@dataclass
class Package:
    """One distribution under packages/, as its files describe it."""

    name: str
    directory: Path
    version: str
    version_file: Path | None  # None for the metapackage (static version in pyproject.toml)
    interface: int | None = None
    releases: dict[int, str] = field(default_factory=dict)
    requires: dict[str, tuple[int, int]] = field(default_factory=dict)
    dependencies: dict[str, str] = field(default_factory=dict)  # sibling -> raw requirement

    @property
    def pyproject(self) -> Path:
        return self.directory / "pyproject.toml"

    @property
    def is_metapackage(self) -> bool:
        return self.version_file is None


def read_assignments(path: Path) -> dict[str, object]:
    """Module-level ``NAME = <literal>`` assignments of a Python file, without running it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    values: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                try:
                    values[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return values


def replace_assignment(text: str, name: str, literal: str) -> str:
    """Return ``text`` with the value of the module-level assignment to ``name`` replaced."""
    lines = text.splitlines(keepends=True)
    for node in ast.parse(text).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
        ):
            value = node.value
            start = sum(len(line) for line in lines[: value.lineno - 1]) + value.col_offset
            end = sum(len(line) for line in lines[: value.end_lineno - 1]) + value.end_col_offset
            return text[:start] + literal + text[end:]
    raise PolicyError(f"no module-level assignment to {name} found")


def load_package(directory: Path) -> Package:
    pyproject = directory / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())
    project = data.get("project", {})
    name = canonical_name(project.get("name", directory.name))
    raw_dependencies = project.get("dependencies", [])
    if "version" in project:
        package = Package(name, directory, str(project["version"]), None)
    else:
        relative = data.get("tool", {}).get("hatch", {}).get("version", {}).get("path")
        if not relative:
            raise PolicyError(f"{pyproject}: dynamic version without [tool.hatch.version] path")
        version_file = directory / relative
        values = read_assignments(version_file)
        for required in ("__version__", "INTERFACE", "INTERFACE_RELEASES"):
            if required not in values:
                raise PolicyError(f"{version_file}: no literal {required} assignment")
        package = Package(
            name,
            directory,
            str(values["__version__"]),
            version_file,
            int(values["INTERFACE"]),
            dict(values["INTERFACE_RELEASES"]),
            {k: tuple(v) for k, v in dict(values.get("REQUIRES", {})).items()},
        )
    for requirement in raw_dependencies:
        match = _REQUIREMENT.match(requirement)
        if match:
            package.dependencies[canonical_name(match.group(1))] = requirement
    return package


def load_tree(root: Path) -> dict[str, Package]:
    """Every distribution under ``root/packages``, by canonical name."""
    packages = {}
    for pyproject in sorted((root / "packages").glob("*/pyproject.toml")):
        package = load_package(pyproject.parent)
        packages[package.name] = package
    if not packages:
        raise PolicyError(f"no packages/*/pyproject.toml under {root}")
    return packages


def sibling_specifier(package: Package, sibling: str) -> str:
    """The version specifier part of ``package``'s requirement on ``sibling``."""
    match = _REQUIREMENT.match(package.dependencies[sibling])
    specifier = match.group(2) if match else ""
    if ";" in specifier or "@" in specifier or "[" in specifier:
        raise PolicyError(
            f"requirement {package.dependencies[sibling]!r} has extras, markers or a URL; "
            f"a sibling requirement is a plain range"
        )
    return specifier


def declared_range(package: Package, sibling: str) -> Range:
    """The range ``package``'s pyproject.toml declares on ``sibling``."""
    return Range.parse(sibling_specifier(package, sibling))


def expected_range(provider: Package, supported: tuple[int, int]) -> Range:
    """The range a consumer supporting ``supported`` interfaces of ``provider`` must declare."""
    low, high = supported
    if low not in provider.releases:
        raise PolicyError(
            f"{provider.name} has never released interface {low} "
            f"(INTERFACE_RELEASES has {sorted(provider.releases)})"
        )
    upper = provider.releases.get(high + 1) or next_minor(provider.version)
    return Range(provider.releases[low], upper)


def metapackage_range(provider: Package) -> Range:
    return Range(minor_floor(provider.version), next_minor(provider.version))


def rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
