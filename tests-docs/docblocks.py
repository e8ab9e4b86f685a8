"""Read the Python code blocks of a Markdown page and the outputs shown after them.

The conventions every page of the site follows (docs/index.md states them for readers too):

- A fence opened with ```` ```python ```` is a code block. A page's blocks run in order in one
  namespace, in a fresh temporary working directory, so a page reads top to bottom like a
  session.
- A fence opened with ```` ```output ```` directly after a code block (blank lines between are
  allowed) is what that block prints. It is compared with the block's standard output.
- A code block preceded by the line ``<!-- skip: REASON -->`` is not run; the reason is required.
- A page holding ``<!-- docs: cpu-devices=N -->`` runs in a process of its own with N simulated
  CPU devices (JAX fixes the device count when it starts), e.g. the scaling recipes.
- Comparing output: trailing spaces and blank lines at the ends are ignored; ``...`` in the shown
  output stands for any text (as doctest's ELLIPSIS); a number in the shown output matches a
  printed number when they differ by at most one unit in the last decimal place shown or by
  1e-4 relative, whichever is larger (float32 results differ between CPUs in the last digits);
  integers (counts, shapes, the 32 of ``float32``) must match exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SKIP = re.compile(r"^<!--\s*skip:\s*(?P<reason>.*?)\s*-->\s*$")
DEVICES = re.compile(r"<!--\s*docs:\s*cpu-devices=(?P<n>\d+)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


@dataclass
class Block:
    """One ```python block: its source, first line, shown output (or None) and skip reason."""

    source: str
    line: int
    output: str | None = None
    skip: str | None = None


def _fence(lines: list[str], start: int) -> tuple[str, int]:
    """The text of the fence opened at ``lines[start]`` and the index after its closing line."""
    body = []
    for index in range(start + 1, len(lines)):
        if lines[index].strip() == "```":
            return "\n".join(body) + "\n", index + 1
        body.append(lines[index])
    raise ValueError(f"line {start + 1}: a ``` fence is never closed")


def blocks(text: str) -> list[Block]:
    """Every ```python block of a page, with the ```output fence that follows it, if any."""
    lines = text.splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        if stripped == "```python":
            skip = SKIP.match(lines[index - 1].strip()) if index else None
            source, index = _fence(lines, index)
            block = Block(source, index, skip=skip["reason"] if skip else None)
            if skip is not None and not block.skip:
                raise ValueError(f"line {index}: '<!-- skip: -->' needs a reason")
            after = index
            while after < len(lines) and not lines[after].strip():
                after += 1
            if after < len(lines) and lines[after].strip() == "```output":
                block.output, index = _fence(lines, after)
            found.append(block)
        elif stripped == "```output":
            raise ValueError(f"line {index + 1}: an ```output fence must follow a ```python block")
        elif stripped.startswith("```"):
            _, index = _fence(lines, index)
        else:
            index += 1
    return found


def _numbers_match(shown: str, got: str) -> bool:
    if "." not in shown and "e" not in shown.lower():
        return shown == got  # integers (counts, shapes, dtype widths) match exactly
    decimals = len(shown.split(".")[1].split("e")[0].split("E")[0]) if "." in shown else 0
    try:
        a, b = float(shown), float(got)
    except ValueError:
        return shown == got
    unit = 10.0**-decimals if "e" not in shown.lower() else abs(a) * 10.0**-decimals
    return abs(a - b) <= max(unit, 1e-4 * abs(a))


def _pattern(shown: str) -> tuple[re.Pattern, list[str]]:
    """A regex for the shown text: numbers become capture groups, ``...`` any text."""
    parts, numbers, position = [], [], 0
    for match in re.finditer(r"\.\.\.|" + NUMBER.pattern, shown):
        parts.append(re.escape(shown[position : match.start()]))
        if match.group() == "...":
            parts.append(r"[\s\S]*?")
        else:
            parts.append(r"(" + NUMBER.pattern + r")")
            numbers.append(match.group())
        position = match.end()
    parts.append(re.escape(shown[position:]))
    return re.compile("".join(parts)), numbers


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def output_matches(shown: str, got: str) -> bool:
    """Whether printed ``got`` matches the ``shown`` output under the rules above."""
    shown, got = _normalise(shown), _normalise(got)
    pattern, numbers = _pattern(shown)
    match = pattern.fullmatch(got)
    if match is None:
        return False
    return all(_numbers_match(s, g) for s, g in zip(numbers, match.groups(), strict=True))


def pages(docs: Path) -> list[Path]:
    """Every Markdown page of the site that holds at least one ```python block."""
    return [p for p in sorted(docs.rglob("*.md")) if "```python" in p.read_text()]


def cpu_devices(text: str) -> int | None:
    """The device count a page asks for with ``<!-- docs: cpu-devices=N -->``, or None."""
    match = DEVICES.search(text)
    return int(match["n"]) if match else None


def run_page(page: Path, workdir: Path) -> tuple[int, int, str | None]:
    """Run a page's blocks in order in one namespace: ``(ran, skipped, first problem or None)``."""
    import contextlib
    import io

    namespace: dict = {"__name__": "__main__"}
    ran = skipped = 0
    for block in blocks(page.read_text()):
        if block.skip:
            skipped += 1
            continue
        stdout = io.StringIO()
        code = compile(block.source, f"{page}:{block.line}", "exec")
        with contextlib.redirect_stdout(stdout), contextlib.chdir(workdir):
            exec(code, namespace)
        ran += 1
        if block.output is not None and not output_matches(block.output, stdout.getvalue()):
            return (
                ran,
                skipped,
                (
                    f"{page}, block at line {block.line}: the output differs from the one shown.\n"
                    f"--- shown\n{block.output}--- printed\n{stdout.getvalue()}"
                ),
            )
    return ran, skipped, None


if __name__ == "__main__":  # python docblocks.py PAGE WORKDIR: one page in this process
    import json
    import sys

    ran, skipped, problem = run_page(Path(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({"ran": ran, "skipped": skipped, "problem": problem}))
