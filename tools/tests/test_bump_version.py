"""tools/bump_version.py on a copied packages tree with made-up versions (see conftest.py)."""

from __future__ import annotations

import ast

import pytest

# Each test runs a tool's command line in a child Python (no jax: a fraction of a second):
# the tools' tests keep them in the default run, counted against the process budget.
pytestmark = pytest.mark.process


def record(tree, dist: str) -> dict:
    values = {}
    for node in ast.parse(tree.version_file(dist).read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def test_patch_bump_changes_only_the_version(tree):
    before = {d: tree.pyproject(d).read_text() for d in ("js", "js-nn", "js-train")}
    result = tree.run("bump_version.py", "js-core", "0.3.3")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "bump_version: js-core 0.3.2 -> 0.3.3\n"
    assert record(tree, "js-core")["__version__"] == "0.3.3"
    assert record(tree, "js-core")["INTERFACE"] == 2
    assert {d: tree.pyproject(d).read_text() for d in before} == before
    assert tree.run("check_versions.py").returncode == 0


def test_minor_bump_moves_upper_bounds_and_the_metapackage(tree):
    result = tree.run("bump_version.py", "js-core", "0.4.0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "bump_version: js-core 0.3.2 -> 0.4.0",
        "bump_version: rewrote packages/js/pyproject.toml: js-core>=0.3.0,<0.4 -> "
        "js-core>=0.4.0,<0.5",
        "bump_version: rewrote packages/js-losses/pyproject.toml: js-core>=0.1.0,<0.4 -> "
        "js-core>=0.1.0,<0.5",
        "bump_version: rewrote packages/js-nn/pyproject.toml: js-core>=0.1.0,<0.4 -> "
        "js-core>=0.1.0,<0.5",
        "bump_version: rewrote packages/js-optim/pyproject.toml: js-core>=0.1.0,<0.4 -> "
        "js-core>=0.1.0,<0.5",
        "bump_version: rewrote packages/js-train/pyproject.toml: js-core>=0.3.0,<0.4 -> "
        "js-core>=0.3.0,<0.5",
    ]
    assert tree.dependency("js-nn", "js-core") == ">=0.1.0,<0.5"
    assert tree.run("check_versions.py").returncode == 0


def test_interface_bump_records_the_release_and_names_consumers_to_change(tree):
    tree.set_requires("js-optim", {"js-core": (1, 3)})  # js-optim is ready for interface 3
    tree.set_dependency("js-optim", "js-core", ">=0.1.0,<0.4")
    result = tree.run("bump_version.py", "js-core", "0.4.0", "--interface")
    assert result.returncode == 0, result.stderr
    assert record(tree, "js-core")["INTERFACE"] == 3
    assert record(tree, "js-core")["INTERFACE_RELEASES"] == {1: "0.1.0", 2: "0.3.0", 3: "0.4.0"}
    lines = result.stdout.splitlines()
    assert lines[0] == "bump_version: js-core 0.3.2 -> 0.4.0 (interface 2 -> 3)"
    assert (
        "bump_version: rewrote packages/js-optim/pyproject.toml: js-core>=0.1.0,<0.4 -> "
        "js-core>=0.1.0,<0.5"
    ) in lines
    assert (
        "bump_version: NEEDS CODE CHANGES: js-nn supports js-core interfaces 1 to 2, but "
        "js-core 0.4.0 offers interface 3: adapt js-nn, widen REQUIRES['js-core'] in "
        "packages/js-nn/src/js/nn/_version.py, bump js-nn, then run tools/check_versions.py"
    ) in lines
    stale = sorted(line.split()[4] for line in lines if "NEEDS CODE CHANGES" in line)
    assert stale == ["js-losses", "js-nn", "js-train"]
    # The stale consumers keep a range that ends before the new interface; the check says so.
    assert tree.dependency("js-nn", "js-core") == ">=0.1.0,<0.4"
    check = tree.run("check_versions.py")
    assert check.returncode == 1
    assert "js-nn/pyproject.toml: js-core range '>=0.1.0,<0.4' excludes" in check.stdout
    assert "js-optim" not in check.stdout


def test_interface_bump_needs_a_new_minor(tree):
    result = tree.run("bump_version.py", "js-core", "0.3.3", "--interface")
    assert result.returncode == 1
    assert result.stderr == (
        "bump_version: error: js-core: an interface changes only with a new minor version; "
        "0.3.2 -> 0.3.3 is not one (use e.g. 0.4.0)\n"
    )
    assert record(tree, "js-core")["__version__"] == "0.3.2"


def test_version_must_increase(tree):
    result = tree.run("bump_version.py", "js-nn", "0.4.0")
    assert result.returncode == 1
    assert result.stderr == "bump_version: error: js-nn: new version 0.4.0 is not after 0.4.1\n"


def test_version_must_be_a_plain_release(tree):
    result = tree.run("bump_version.py", "js-nn", "0.5.0rc1")
    assert result.returncode == 1
    assert "version '0.5.0rc1' is not a plain release version like '0.1.0'" in result.stderr


def test_unknown_package_is_refused(tree):
    result = tree.run("bump_version.py", "js-vision", "0.1.0")
    assert result.returncode == 1
    assert result.stderr.startswith("bump_version: error: unknown package 'js-vision'; known: [")


def test_metapackage_bump_edits_its_static_version(tree):
    result = tree.run("bump_version.py", "js", "0.9.0")
    assert result.returncode == 0, result.stderr
    assert 'version = "0.9.0"' in tree.pyproject("js").read_text()
    result = tree.run("bump_version.py", "js", "0.10.0", "--interface")
    assert result.stderr == (
        "bump_version: error: js is the metapackage: it has no interface to bump\n"
    )


def test_bump_of_a_middle_library_follows_into_js_train(tree):
    result = tree.run("bump_version.py", "js-nn", "0.5.0")
    assert result.returncode == 0, result.stderr
    assert tree.dependency("js-train", "js-nn") == ">=0.1.0,<0.6"
    assert tree.dependency("js", "js-nn") == ">=0.5.0,<0.6"
    assert tree.run("check_versions.py").returncode == 0
