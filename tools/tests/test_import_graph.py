"""tools/check_imports.py: the folder tree is the dependency graph (every import, every
declaration), on the real tree and on small synthetic ones."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import check_imports  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_every_distribution_imports_exactly_what_it_declares():
    problems = check_imports.problems(ROOT)
    assert not problems, "\n".join(problems)


def test_no_distribution_imports_one_above_it_even_lazily():
    # No exception is tolerated: js.nn.functional's forwarding to js.losses is gone.
    assert check_imports.KNOWN == {}


def _package(
    root: Path, dist: str, deps: list[str], files: dict[str, str], extras: dict | None = None
) -> None:
    package = root / "packages" / dist
    lines = [
        "[project]",
        f'name = "{dist}"',
        "dependencies = [" + ", ".join(f'"{d}"' for d in deps) + "]",
    ]
    if extras:
        lines.append("[project.optional-dependencies]")
        lines += [f"{k} = [" + ", ".join(f'"{d}"' for d in v) + "]" for k, v in extras.items()]
    package.mkdir(parents=True)
    (package / "pyproject.toml").write_text("\n".join(lines) + "\n")
    for relative, text in files.items():
        path = package / "src" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _tree(tmp_path: Path, nn_code: str, nn_deps=("js-core>=0.2", "numpy>=1"), extras=None):
    _package(tmp_path, "js-core", ["numpy>=1"], {"js/_x.py": "import numpy\n"})
    _package(tmp_path, "js-nn", list(nn_deps), {"js/nn/_y.py": nn_code}, extras)
    return tmp_path


@pytest.mark.parametrize(
    "code",
    [
        "import js.training\n",
        "from js.training import load_checkpoint\n",
        "def f():\n    from js.training._ckpt_load import load_checkpoint\n",
        "import importlib\ndef f():\n    return importlib.import_module('js.training')\n",
        "def f():\n    return __import__('js.training')\n",
        "def f():\n    try:\n        import js.training\n    except ImportError:\n        pass\n",
    ],
)
def test_an_upward_import_is_caught_with_file_line_and_import(tmp_path, code):
    root = _tree(tmp_path, "import numpy\nimport js\n" + code)
    problems = check_imports.problems(root)
    assert len(problems) == 1, problems
    assert problems[0].startswith("packages/js-nn/src/js/nn/_y.py:"), problems
    assert ": import js.training" in problems[0], problems
    assert (
        "js-nn imports the js distribution js-train, which its pyproject does not declare"
        in problems[0]
    )
    assert check_imports.main(["--root", str(root)]) == 1


def test_a_clean_tree_passes(tmp_path, capsys):
    root = _tree(tmp_path, "import numpy\nimport js\nfrom . import _z\n")
    assert check_imports.main(["--root", str(root)]) == 0
    assert capsys.readouterr().out.startswith("OK")


def test_undeclared_unused_and_unknown_third_party(tmp_path):
    code = "import numpy\nimport js\nimport orbax.checkpoint as ocp\nimport mystery\n"
    problems = check_imports.problems(_tree(tmp_path, code, ("js-core>=0.2", "numpy", "rich")))
    assert any(
        "_y.py:3: import orbax.checkpoint: js-nn imports the distribution orbax-checkpoint" in p
        and "Fix: add orbax-checkpoint to packages/js-nn/pyproject.toml" in p
        for p in problems
    ), problems
    assert any("_y.py:4: import mystery: unknown third-party module" in p for p in problems)
    assert any("declares rich, which its code never imports" in p for p in problems), problems


def test_a_guarded_import_may_come_from_an_extra(tmp_path):
    guarded = "import numpy\nimport js\ntry:\n    import rich\nexcept ImportError:\n    pass\n"
    extras = {"pretty": ["rich>=13"]}
    assert check_imports.problems(_tree(tmp_path / "a", guarded, extras=extras)) == []
    plain = "import numpy\nimport js\nimport rich\n"
    problems = check_imports.problems(_tree(tmp_path / "b", plain, extras=extras))
    assert ["imports the distribution rich" in p for p in problems] == [True], problems


def test_a_declared_dependency_on_a_layer_above_is_caught(tmp_path):
    root = _tree(
        tmp_path,
        "import numpy\nimport js\nimport js.training\n",
        ("js-core>=0.2", "js-train>=0.2", "numpy"),
    )
    problems = check_imports.problems(root)
    assert any(
        "js-nn declares js-train, which is not below it in the dependency graph" in p
        for p in problems
    ), problems


def test_the_interface_check_counts_as_an_import_of_each_required_sibling(tmp_path):
    # js._interface.require imports each REQUIRES entry's version module when js.nn loads.
    _tree(tmp_path, "import numpy\nimport js\n")
    version = tmp_path / "packages" / "js-nn" / "src" / "js" / "nn" / "_version.py"
    version.write_text('REQUIRES = {"js-core": (1, 1),\n            "js-train": (1, 1)}\n')
    problems = check_imports.problems(tmp_path)
    assert len(problems) == 1 and problems[0].startswith(
        "packages/js-nn/src/js/nn/_version.py:1: import js.training._version: js-nn imports "
        "the js distribution js-train"
    ), problems


def test_a_computed_import_name_is_a_problem_unless_recorded(tmp_path):
    code = (
        "import numpy\nimport js\nimport importlib\nname = 'js.training'\n"
        "module = importlib.import_module(name)\n"
    )
    problems = check_imports.problems(_tree(tmp_path, code))
    assert (
        len(problems) == 1
        and "_y.py:5: import <computed name>: a computed module name" in problems[0]
    ), problems
