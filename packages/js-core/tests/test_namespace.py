import importlib.metadata
import subprocess
import sys
import textwrap

import pytest

import js


def run_with_core_only(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where only js-core's portion of ``js`` is visible."""
    prelude = textwrap.dedent(
        """
        import js
        js.__path__[:] = [p for p in js.__path__ if p.endswith("js-core/src/js")] or js.__path__[:1]
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("statement", "distribution"),
    [
        ("import js.training", "js-train"),  # the default run's one fresh-interpreter check
        pytest.param("import js.optim", "js-optim", marks=pytest.mark.slow),
        pytest.param("from js import optim", "js-optim", marks=pytest.mark.slow),
        pytest.param("from js import nn", "js-nn", marks=pytest.mark.slow),
        pytest.param("import js.losses", "js-losses", marks=pytest.mark.slow),
    ],
)
@pytest.mark.process
def test_missing_distribution_names_the_fix(statement, distribution):
    result = run_with_core_only(statement)
    assert result.returncode != 0
    assert f"provided by the {distribution} distribution, which is not installed" in result.stderr
    assert f"pip install {distribution}" in result.stderr


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(
    not (_installed("js-nn") and _installed("js-optim")),
    reason="needs js-nn and js-optim installed (the integration suite covers the wheel case)",
)
@pytest.mark.process
@pytest.mark.slow
def test_from_js_import_finds_installed_siblings():
    code = "from js import nn, optim; print(nn.__name__, optim.__name__)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["js.nn", "js.optim"]


def test_unknown_attribute_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="module 'js' has no attribute 'nothing'"):
        js.nothing  # noqa: B018


def test_version_and_interface():
    assert js.__version__ == "0.2.0" and js.__interface__ == 2
