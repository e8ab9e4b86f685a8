"""The README's example runs as written (js-train's environment holds every distribution)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[3] / "README.md"


def test_readme_example_trains_one_step(capsys):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace = {}
    exec(compile(code, str(README), "exec"), namespace)
    loss = float(capsys.readouterr().out.strip())
    assert 0.0 < loss < 10.0
    assert int(namespace["optimizer"].step_count) == 1
