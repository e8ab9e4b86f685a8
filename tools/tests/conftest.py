"""A temporary copy of the packages tree (pyproject.toml and _version.py only) to run the tools on.

The copy gets made-up versions so that the tests do not depend on the real release numbers.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"

VERSION_FILES = {
    "js-core": "src/js/_version.py",
    "js-nn": "src/js/nn/_version.py",
    "js-losses": "src/js/losses/_version.py",
    "js-optim": "src/js/optim/_version.py",
    "js-train": "src/js/training/_version.py",
}
LIBRARIES = list(VERSION_FILES)


class Tree:
    """The copied tree, with helpers to edit it and to run the tools on it."""

    def __init__(self, root: Path):
        self.root = root

    def pyproject(self, dist: str) -> Path:
        return self.root / "packages" / dist / "pyproject.toml"

    def version_file(self, dist: str) -> Path:
        return self.root / "packages" / dist / VERSION_FILES[dist]

    def set_record(self, dist: str, version: str, interface: int, releases: dict) -> None:
        path = self.version_file(dist)
        kept = [
            line
            for line in path.read_text().splitlines()
            if not line.startswith(("__version__", "INTERFACE"))
        ]
        kept += [
            f'__version__ = "{version}"',
            f"INTERFACE = {interface}",
            f"INTERFACE_RELEASES = {releases!r}",
        ]
        path.write_text("\n".join(kept) + "\n")

    def set_requires(self, dist: str, requires: dict) -> None:
        path = self.version_file(dist)
        kept = [line for line in path.read_text().splitlines() if not line.startswith("REQUIRES")]
        path.write_text("\n".join(kept + [f"REQUIRES = {requires!r}"]) + "\n")

    def set_dependency(self, dist: str, sibling: str, specifier: str) -> None:
        path = self.pyproject(dist)
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith(f'"{sibling}>=') or line.strip().startswith(f'"{sibling}='):
                lines[i] = f'  "{sibling}{specifier}",'
                break
        else:
            raise AssertionError(f"{dist} has no dependency on {sibling}")
        path.write_text("\n".join(lines) + "\n")

    def dependency(self, dist: str, sibling: str) -> str:
        for line in self.pyproject(dist).read_text().splitlines():
            if line.strip().startswith(f'"{sibling}>=') or line.strip().startswith(f'"{sibling}<'):
                return line.strip().strip(",").strip('"')[len(sibling) :]
        raise AssertionError(f"{dist} has no dependency on {sibling}")

    def run(self, tool: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(TOOLS / tool), *args, "--root", str(self.root)],
            capture_output=True,
            text=True,
            check=False,
        )


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    """The packages tree at made-up versions: js-core 0.3.2 offering interface 2 (since 0.3.0).

    The made-up tree is the five libraries of VERSION_FILES and the metapackage; distributions
    added later (js-models) are left out of it, so that the expected outputs stay fixed.
    """
    for pyproject in (ROOT / "packages").glob("*/pyproject.toml"):
        if pyproject.parent.name not in (*VERSION_FILES, "js"):
            continue
        target = tmp_path / pyproject.relative_to(ROOT)
        target.parent.mkdir(parents=True)
        shutil.copy(pyproject, target)
    for dist, relative in VERSION_FILES.items():
        target = tmp_path / "packages" / dist / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "packages" / dist / relative, target)
    tree = Tree(tmp_path)
    meta = tree.pyproject("js")
    meta.write_text(
        "".join(
            line
            for line in meta.read_text().splitlines(keepends=True)
            if not line.strip().startswith('"js-')
            or line.strip()[1:].split(">")[0] in VERSION_FILES
        )
    )
    tree.set_record("js-core", "0.3.2", 2, {1: "0.1.0", 2: "0.3.0"})
    for dist in LIBRARIES[1:]:
        tree.set_record(dist, "0.4.1", 1, {1: "0.1.0"})
    for dist in ("js-nn", "js-losses", "js-optim"):
        tree.set_requires(dist, {"js-core": (1, 2)})
        tree.set_dependency(dist, "js-core", ">=0.1.0,<0.4")
    tree.set_requires("js-nn", {"js-core": (1, 2), "js-losses": (1, 1)})  # F's losses
    tree.set_dependency("js-nn", "js-losses", ">=0.1.0,<0.5")
    tree.set_requires(
        "js-train", {"js-core": (2, 2), "js-nn": (1, 1), "js-losses": (1, 1), "js-optim": (1, 1)}
    )
    tree.set_dependency("js-train", "js-core", ">=0.3.0,<0.4")
    for dist in ("js-nn", "js-losses", "js-optim"):
        tree.set_dependency("js-train", dist, ">=0.1.0,<0.5")
    tree.set_dependency("js", "js-core", ">=0.3.0,<0.4")
    for dist in LIBRARIES[1:]:
        tree.set_dependency("js", dist, ">=0.4.0,<0.5")
    return tree
