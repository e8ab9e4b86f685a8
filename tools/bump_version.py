"""Bump one js distribution's version and rewrite the sibling ranges that must follow.

Usage: python tools/bump_version.py PACKAGE NEW_VERSION [--interface] [--root DIR]

* Sets PACKAGE's version (its _version.py, or pyproject.toml for the ``js`` metapackage).
* With --interface, also starts a new interface: INTERFACE + 1, recorded in INTERFACE_RELEASES
  as first released in NEW_VERSION, which must then be a new minor (X.Y.0).
* Rewrites, per docs/versioning.md, the range on PACKAGE in every consumer whose REQUIRES still
  covers PACKAGE's interface, and in the metapackage.
* Prints the consumers whose REQUIRES no longer cover PACKAGE's interface: they need code
  changes (then a wider REQUIRES, then their own bump), and tools/check_versions.py fails
  until they have them.
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
    replace_assignment,
)

ROOT = Path(__file__).resolve().parent.parent


def validate(package: Package, new_version: str, interface: bool) -> None:
    old, new = parse_version(package.version), parse_version(new_version)
    if new <= old:
        raise PolicyError(
            f"{package.name}: new version {new_version} is not after {package.version}"
        )
    if interface and package.is_metapackage:
        raise PolicyError(f"{package.name} is the metapackage: it has no interface to bump")
    if interface and (new[2:] != (0,) or new[:2] <= old[:2]):
        raise PolicyError(
            f"{package.name}: an interface changes only with a new minor version; "
            f"{package.version} -> {new_version} is not one (use e.g. {old[0]}.{old[1] + 1}.0)"
        )


def write_version(package: Package, new_version: str, interface: bool) -> None:
    if package.is_metapackage:
        text = package.pyproject.read_text()
        old_line = f'version = "{package.version}"'
        if old_line not in text:
            raise PolicyError(f"{package.pyproject}: no line {old_line!r} to rewrite")
        package.pyproject.write_text(text.replace(old_line, f'version = "{new_version}"', 1))
        package.version = new_version
        return
    text = replace_assignment(package.version_file.read_text(), "__version__", f'"{new_version}"')
    if interface:
        package.interface += 1
        package.releases[package.interface] = new_version
        releases = ", ".join(f'{k}: "{v}"' for k, v in sorted(package.releases.items()))
        text = replace_assignment(text, "INTERFACE", str(package.interface))
        text = replace_assignment(text, "INTERFACE_RELEASES", "{" + releases + "}")
    package.version_file.write_text(text)
    package.version = new_version


def rewrite_range(consumer: Package, provider: Package, wanted: Range, root: Path) -> str | None:
    """Point ``consumer``'s requirement on ``provider`` at ``wanted``; describe the change."""
    old_requirement = consumer.dependencies[provider.name]
    old_range = declared_range(consumer, provider.name)
    if old_range.same_as(wanted):
        return None
    name_part = old_requirement[: len(old_requirement) - len(old_requirement.lstrip())]
    name_part += old_requirement.strip()[: len(provider.name)]
    new_requirement = f"{name_part}{wanted}"
    text = consumer.pyproject.read_text()
    if f'"{old_requirement}"' not in text:
        raise PolicyError(f"{consumer.pyproject}: cannot find {old_requirement!r} to rewrite")
    consumer.pyproject.write_text(text.replace(f'"{old_requirement}"', f'"{new_requirement}"', 1))
    consumer.dependencies[provider.name] = new_requirement
    return f"{rel(consumer.pyproject, root)}: {old_requirement} -> {new_requirement}"


def follow(provider: Package, packages: dict[str, Package], root: Path) -> tuple[list, list]:
    """Rewrite the ranges on ``provider``; return (changes, consumers needing code changes)."""
    changes, stale = [], []
    for consumer in packages.values():
        if provider.name not in consumer.dependencies or consumer is provider:
            continue
        if consumer.is_metapackage:
            wanted = metapackage_range(provider)
        else:
            supported = consumer.requires.get(provider.name)
            if supported is None:
                continue
            if not supported[0] <= provider.interface <= supported[1]:
                stale.append((consumer, supported))
                continue
            wanted = expected_range(provider, supported)
        change = rewrite_range(consumer, provider, wanted, root)
        if change:
            changes.append(change)
    return changes, stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", help="distribution name, e.g. js-core")
    parser.add_argument("new_version", help="e.g. 0.2.0")
    parser.add_argument("--interface", action="store_true", help="start a new interface too")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    try:
        packages = load_tree(root)
        package = packages.get(args.package)
        if package is None:
            raise PolicyError(f"unknown package {args.package!r}; known: {sorted(packages)}")
        old_version, old_interface = package.version, package.interface
        validate(package, args.new_version, args.interface)
        write_version(package, args.new_version, args.interface)
        changes, stale = follow(package, packages, root)
    except PolicyError as error:
        print(f"bump_version: error: {error}", file=sys.stderr)
        return 1
    interface = f" (interface {old_interface} -> {package.interface})" if args.interface else ""
    print(f"bump_version: {package.name} {old_version} -> {package.version}{interface}")
    for change in changes:
        print(f"bump_version: rewrote {change}")
    for consumer, (low, high) in stale:
        print(
            f"bump_version: NEEDS CODE CHANGES: {consumer.name} supports {package.name} interfaces "
            f"{low} to {high}, but {package.name} {package.version} offers interface "
            f"{package.interface}: adapt {consumer.name}, widen REQUIRES[{package.name!r}] in "
            f"{rel(consumer.version_file, root)}, bump {consumer.name}, then run "
            f"tools/check_versions.py"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
