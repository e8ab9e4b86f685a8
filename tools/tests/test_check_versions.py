"""tools/check_versions.py on a copied packages tree with made-up versions."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# Each test runs a tool's command line in a child Python (no jax: a fraction of a second):
# the tools' tests keep them in the default run, counted against the process budget.
pytestmark = pytest.mark.process


def problems(result) -> list[str]:
    return [line for line in result.stdout.splitlines() if not line.endswith("docs/versioning.md")]


def test_consistent_tree_passes_with_one_ok_line(tree):
    result = tree.run("check_versions.py")
    assert result.returncode == 0, result.stdout
    assert re.fullmatch(r"check_versions: OK: 6 distributions, .*\n", result.stdout)


def test_the_real_tree_passes():
    tools = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, str(tools / "check_versions.py")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout


def test_range_that_disagrees_with_requires_is_reported(tree):
    tree.set_dependency("js-optim", "js-core", ">=0.1.0,<0.5")
    result = tree.run("check_versions.py")
    assert result.returncode == 1
    assert problems(result) == [
        "check_versions: packages/js-optim/pyproject.toml: js-core range '>=0.1.0,<0.5' "
        "disagrees with REQUIRES['js-core'] = (1, 2) in packages/js-optim/src/js/optim/"
        "_version.py: expected '>=0.1.0,<0.4'"
    ]
    assert result.stdout.splitlines()[-1] == (
        "check_versions: FAILED with 1 problem(s); see docs/versioning.md"
    )


def test_upper_bound_is_the_next_interface_release_when_there_is_one(tree):
    # js-train supports only interface 1 of js-nn; js-nn 0.5.0 released interface 2.
    tree.set_record("js-nn", "0.5.0", 2, {1: "0.1.0", 2: "0.5.0"})
    tree.set_dependency("js", "js-nn", ">=0.5.0,<0.6")
    result = tree.run("check_versions.py")
    assert problems(result) == [
        "check_versions: packages/js-train/pyproject.toml: js-nn range '>=0.1.0,<0.5' excludes "
        "js-nn's current version 0.5.0 (interface 2): widen the range with "
        "tools/bump_version.py, or adapt js-train to the new interface first"
    ]


def test_lower_bound_is_the_first_release_of_the_lowest_supported_interface(tree):
    tree.set_dependency("js-train", "js-core", ">=0.1.0,<0.4")
    result = tree.run("check_versions.py")
    assert "expected '>=0.3.0,<0.4'" in result.stdout
    assert result.returncode == 1


def test_range_excluding_the_current_version_is_reported(tree):
    tree.set_record("js-core", "0.4.0", 2, {1: "0.1.0", 2: "0.3.0"})
    result = tree.run("check_versions.py")
    lines = problems(result)
    assert result.returncode == 1
    assert (
        "check_versions: packages/js-nn/pyproject.toml: js-core range '>=0.1.0,<0.4' disagrees "
        "with REQUIRES['js-core'] = (1, 2) in packages/js-nn/src/js/nn/_version.py: "
        "expected '>=0.1.0,<0.5'"
    ) in lines
    assert (
        "check_versions: packages/js-nn/pyproject.toml: js-core range '>=0.1.0,<0.4' excludes "
        "js-core's current version 0.4.0 (interface 2): widen the range with "
        "tools/bump_version.py, or adapt js-nn to the new interface first"
    ) in lines
    assert (
        "check_versions: packages/js/pyproject.toml: js-core range '>=0.3.0,<0.4' disagrees "
        "with the metapackage policy (the current minor of js-core 0.4.0): expected '>=0.4.0,<0.5'"
    ) in lines


def test_exact_pin_is_refused(tree):
    tree.set_dependency("js-losses", "js-core", "==0.3.2")
    result = tree.run("check_versions.py")
    assert problems(result) == [
        "check_versions: packages/js-losses/pyproject.toml: js-core: range '==0.3.2' is not of "
        "the form '>=LOW,<HIGH' (sibling dependencies are ranges, never exact pins)"
    ]


def test_interface_not_latest_release_is_reported(tree):
    tree.set_record("js-core", "0.3.2", 1, {1: "0.1.0", 2: "0.3.0"})
    result = tree.run("check_versions.py")
    assert (
        "check_versions: packages/js-core/src/js/_version.py: INTERFACE = 1 is not the latest "
        "interface in INTERFACE_RELEASES {1: '0.1.0', 2: '0.3.0'}; record each new interface "
        "with its first release"
    ) in problems(result)


def test_interface_change_without_minor_bump_is_reported(tree):
    tree.set_record("js-core", "0.1.5", 2, {1: "0.1.0", 2: "0.1.5"})
    result = tree.run("check_versions.py")
    assert (
        "check_versions: packages/js-core/src/js/_version.py: INTERFACE_RELEASES "
        "{1: '0.1.0', 2: '0.1.5'} changes interface without a minor version bump "
        "(0.1.0 -> 0.1.5); an interface changes only with a new minor"
    ) in problems(result)


def test_interface_released_after_current_version_is_reported(tree):
    tree.set_record("js-core", "0.3.2", 2, {1: "0.1.0", 2: "0.4.0"})
    result = tree.run("check_versions.py")
    assert (
        "check_versions: packages/js-core/src/js/_version.py: interface 2 is recorded as first "
        "released in 0.4.0, after the current version 0.3.2"
    ) in problems(result)


def test_requires_and_dependencies_must_name_the_same_siblings(tree):
    tree.set_requires("js-nn", {"js-core": (1, 2), "js-optim": (1, 1)})
    tree.set_requires("js-losses", {})
    lines = problems(tree.run("check_versions.py"))
    assert (
        "check_versions: packages/js-nn/src/js/nn/_version.py: REQUIRES names js-optim, which "
        "pyproject.toml does not name"
    ) in lines
    assert (
        "check_versions: packages/js-losses/pyproject.toml: depends on js-core but REQUIRES in "
        "packages/js-losses/src/js/losses/_version.py does not name it (add its supported "
        "interface range)"
    ) in lines


def test_requires_an_unreleased_interface_is_reported(tree):
    tree.set_requires("js-optim", {"js-core": (1, 3)})
    assert problems(tree.run("check_versions.py")) == [
        "check_versions: packages/js-optim/src/js/optim/_version.py: REQUIRES['js-core'] = "
        "(1, 3) is not a range of released js-core interfaces (1 to 2)"
    ]


def test_metapackage_must_depend_on_every_library(tree):
    path = tree.pyproject("js")
    path.write_text(
        "\n".join(line for line in path.read_text().splitlines() if '"js-train' not in line)
    )
    assert problems(tree.run("check_versions.py")) == [
        "check_versions: packages/js/pyproject.toml: the metapackage does not depend on js-train"
    ]


def test_unreadable_version_file_is_reported(tree):
    tree.version_file("js-optim").write_text('__version__ = "0.4.1"\n')
    result = tree.run("check_versions.py")
    assert result.returncode == 1
    assert "js-optim/src/js/optim/_version.py: no literal INTERFACE assignment" in result.stdout
