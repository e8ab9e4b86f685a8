"""Check that the sibling version ranges of every js distribution follow the interface policy.

Usage: python tools/check_versions.py [--root DIR]

Reads packages/*/pyproject.toml and each library's _version.py as files (js is never imported)
and prints one line per problem, exiting 1, when:

* a library's INTERFACE / INTERFACE_RELEASES record is inconsistent (the interface must be the
  latest released one, and each new interface comes with a new minor version);
* a consumer's pyproject dependencies and its REQUIRES name different siblings;
* a sibling range in pyproject.toml disagrees with the range the interfaces in REQUIRES imply
  (see docs/versioning.md), or the metapackage's range is not the sibling's current minor;
* any sibling range, the metapackage's included, excludes that sibling's current version.

Otherwise it prints one line starting with "OK" and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from versioning import (
    Package,
    PolicyError,
    Range,
    declared_range,
    expected_range,
    load_tree,
    metapackage_range,
    parse_version,
    rel,
)

ROOT = Path(__file__).resolve().parent.parent


def record_problems(package: Package, root: Path) -> list[str]:
    """Problems in one library's INTERFACE / INTERFACE_RELEASES record."""
    where = rel(package.version_file, root)
    releases = package.releases
    if package.interface not in releases or package.interface != max(releases):
        return [
            f"{where}: INTERFACE = {package.interface} is not the latest interface in "
            f"INTERFACE_RELEASES {releases}; record each new interface with its first release"
        ]
    problems = []
    if parse_version(releases[package.interface]) > parse_version(package.version):
        problems.append(
            f"{where}: interface {package.interface} is recorded as first released in "
            f"{releases[package.interface]}, after the current version {package.version}"
        )
    ordered = [releases[i] for i in sorted(releases)]
    for earlier, later in zip(ordered, ordered[1:], strict=False):
        if parse_version(later)[:2] <= parse_version(earlier)[:2]:
            problems.append(
                f"{where}: INTERFACE_RELEASES {releases} changes interface without a minor "
                f"version bump ({earlier} -> {later}); an interface changes only with a new minor"
            )
    return problems


def dependency_problems(
    consumer: Package, provider: Package, wanted: Range, why: str, root: Path
) -> list[str]:
    """Compare ``consumer``'s declared range on ``provider`` with ``wanted``."""
    where = f"{rel(consumer.pyproject, root)}: {provider.name}"
    try:
        declared = declared_range(consumer, provider.name)
    except PolicyError as error:
        return [f"{where}: {error}"]
    problems = []
    if not declared.same_as(wanted):
        problems.append(f"{where} range '{declared}' disagrees with {why}: expected '{wanted}'")
    if not declared.contains(provider.version):
        problems.append(
            f"{where} range '{declared}' excludes {provider.name}'s current version "
            f"{provider.version} (interface {provider.interface}): widen the range with "
            f"tools/bump_version.py, or adapt {consumer.name} to the new interface first"
        )
    return problems


def consumer_problems(consumer: Package, libraries: dict[str, Package], root: Path) -> list[str]:
    where = rel(consumer.version_file, root)
    declared = {name for name in consumer.dependencies if name in libraries}
    problems = [
        f"{rel(consumer.pyproject, root)}: depends on {name} but REQUIRES in {where} does not "
        f"name it (add its supported interface range)"
        for name in sorted(declared - set(consumer.requires))
    ]
    for name, supported in sorted(consumer.requires.items()):
        provider = libraries.get(name)
        if provider is None or name not in declared:
            reason = "is not a js library" if provider is None else "pyproject.toml does not name"
            problems.append(f"{where}: REQUIRES names {name}, which {reason}")
            continue
        low, high = supported
        if not 1 <= low <= high or high > provider.interface:
            problems.append(
                f"{where}: REQUIRES[{name!r}] = {supported} is not a range of released "
                f"{name} interfaces (1 to {provider.interface})"
            )
            continue
        why = f"REQUIRES[{name!r}] = {supported} in {where}"
        try:
            wanted = expected_range(provider, supported)
        except PolicyError as error:
            problems.append(f"{where}: {error}")
            continue
        problems += dependency_problems(consumer, provider, wanted, why, root)
    return problems


def metapackage_problems(meta: Package, libraries: dict[str, Package], root: Path) -> list[str]:
    problems = [
        f"{rel(meta.pyproject, root)}: the metapackage does not depend on {name}"
        for name in sorted(set(libraries) - set(meta.dependencies))
    ]
    for name in sorted(set(libraries) & set(meta.dependencies)):
        provider = libraries[name]
        why = f"the metapackage policy (the current minor of {name} {provider.version})"
        problems += dependency_problems(meta, provider, metapackage_range(provider), why, root)
    return problems


def find_problems(root: Path) -> list[str]:
    try:
        packages = load_tree(root)
    except (PolicyError, OSError, ValueError, SyntaxError) as error:
        return [str(error)]
    libraries = {name: p for name, p in packages.items() if not p.is_metapackage}
    problems: list[str] = []
    for package in packages.values():
        if package.is_metapackage:
            problems += metapackage_problems(package, libraries, root)
        else:
            problems += record_problems(package, root)
            problems += consumer_problems(package, libraries, root)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    root = parser.parse_args(argv).root.resolve()
    problems = find_problems(root)
    if problems:
        for problem in problems:
            print(f"check_versions: {problem}")
        print(f"check_versions: FAILED with {len(problems)} problem(s); see docs/versioning.md")
        return 1
    count = len(list((root / "packages").glob("*/pyproject.toml")))
    print(f"check_versions: OK: {count} distributions, sibling ranges match their interfaces")
    return 0


if __name__ == "__main__":
    sys.exit(main())
