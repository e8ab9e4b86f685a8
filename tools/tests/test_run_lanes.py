"""tools/run_lanes.py: test:all's checks and suites side by side (real shell commands)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import run_lanes  # noqa: E402


def test_two_lanes_run_at_once_and_print_each_output_whole(tmp_path, capsys):
    signal = tmp_path / "signal"
    # the first waits (at most 20 s) for a file the second makes: one lane would never see it
    waits = f"i=0; while [ ! -e {signal} ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; "
    waits += f"test -e {signal} && echo first-line && echo second-line"
    assert run_lanes.run([waits, f"echo made && touch {signal}"], lanes=2, poll_s=0.01) == 0
    out = capsys.readouterr().out
    assert "run_lanes: 2 command(s) passed" in out
    # the second ended first; the first's two lines are printed together under its heading
    assert out.index("echo made") < out.index(": passed after", out.index("while"))
    body = out[out.index(f"{waits}: passed after") :]
    assert "first-line\nsecond-line\n" in body


def test_the_first_failure_stops_the_others_and_starts_nothing_more(tmp_path, capsys):
    never = tmp_path / "never"
    commands = ["sleep 60; echo overslept", "echo broken; exit 3", f"touch {never}"]
    assert run_lanes.run(commands, lanes=2, poll_s=0.01) == 3
    captured = capsys.readouterr()
    assert "echo broken; exit 3: FAILED (exit code 3)" in captured.out
    assert "broken" in captured.out
    assert "sleep 60; echo overslept: stopped (another command failed)" in captured.out
    assert "\noverslept\n" not in captured.out  # killed before its echo
    assert f"1 command(s) not started: ['touch {never}']" in captured.err
    assert not never.exists()


def test_extra_arguments_go_to_every_command_but_the_fixed_ones():
    lanes, commands = run_lanes.parse(
        ["--lanes", "3", "printf [%s]", "--fixed", "printf <%s>", "echo", "--", "-m", ""]
    )
    assert lanes == 3
    assert commands == ["printf [%s] -m ''", "printf <%s>", "echo -m ''"]
    assert run_lanes.parse(["echo a"])[1] == ["echo a"]


def test_extra_arguments_reach_the_command_as_separate_words(capsys):
    _, commands = run_lanes.parse(["printf [%s]", "--", "-m", "", "not slow"])
    assert run_lanes.run(commands, lanes=1, poll_s=0.01) == 0
    assert "[-m][][not slow]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "no command given"),
        (["--lanes", "0", "echo"], "--lanes takes a whole number >= 1, got '0'"),
        (["--lanes", "two", "echo"], "--lanes takes a whole number >= 1, got 'two'"),
        (["--fixed"], "--fixed needs a value"),
        (["--lane", "2", "echo"], "unknown option '--lane'"),
    ],
)
def test_bad_use_says_what_was_wrong(argv, message):
    with pytest.raises(SystemExit, match=message.replace("[", r"\[")):
        run_lanes.parse(argv)
