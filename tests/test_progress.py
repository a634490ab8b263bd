"""scripts/progress.sh: a long set-up step shows one line (what, how long, what is next), its output goes
to a log, and a failure names that log."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sandbox.processes import run_captured
from tests.support.paths import ROOT


def run_step(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    script = f'source {ROOT}/scripts/progress.sh; progress test "compiling the thing" "the next thing" "$1" {command}'
    # stderr is a pipe, not a terminal: the line is printed when the step starts and when it ends.
    return run_captured(["bash", "-c", script, "-", str(tmp_path / "logs" / "x.log")])


def test_a_step_prints_its_line_and_logs_its_output(tmp_path: Path) -> None:
    result = run_step(tmp_path, "bash -c 'for i in $(seq 300); do echo go: downloading module$i; done'")
    assert result.returncode == 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "[test] compiling the thing ...; next: the next thing"
    assert lines[1].startswith("[test] compiling the thing: done in ") and lines[1].endswith(" s; next: the next thing")
    assert len(lines) == 2
    logged = (tmp_path / "logs" / "x.log").read_text().splitlines()
    assert sum(line.startswith("go: downloading") for line in logged) == 300


def test_a_failed_step_shows_the_end_of_its_log_and_names_it(tmp_path: Path) -> None:
    result = run_step(tmp_path, "bash -c 'echo the cause; exit 3'")
    assert result.returncode == 3
    assert "the cause" in result.stderr
    # Its seconds are whatever a loaded machine took.
    assert re.search(
        rf"compiling the thing failed after \d+ s \(exit 3\); the whole log is {re.escape(str(tmp_path))}/logs/x.log",
        result.stderr,
    ), result.stderr


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = f"set -euo pipefail; source {ROOT}/scripts/progress.sh; {body}"
    return run_captured(["bash", "-c", script, "-", str(tmp_path / "x.log")])


def test_a_step_that_is_a_shell_function_stops_at_its_first_failure(tmp_path: Path) -> None:
    """A caller's function runs with `set -e` in force, as it would outside progress (called from `if` or
    `||` it would run on), and the failure stops the caller."""
    result = run_script(
        tmp_path, 'step() { echo first; false; echo after-the-failure; }; progress t one "" "$1" step; echo on'
    )
    assert result.returncode == 1 and result.stdout == ""
    assert re.search(
        rf"one failed after \d+ s \(exit 1\); the whole log is {re.escape(str(tmp_path))}/x.log", result.stderr
    ), result.stderr
    logged = (tmp_path / "x.log").read_text()
    assert "first" in logged and "after-the-failure" not in logged


def test_a_functions_exit_ends_the_step_not_the_caller(tmp_path: Path) -> None:
    result = run_script(tmp_path, 'dies() { echo dying; exit 4; }; progress t two "" "$1" dies || echo "two: $?"')
    assert result.returncode == 0 and result.stdout == "two: 4\n"
    assert "dying" in result.stderr  # the end of the log, shown with the failure
