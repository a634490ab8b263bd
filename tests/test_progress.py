"""scripts/progress.sh: a long set-up step shows one line (what, how long, what is next), its output goes
to a log, and a failure names that log."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.paths import ROOT


def run_step(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    script = f'source {ROOT}/scripts/progress.sh; progress test "compiling the thing" "the next thing" "$1" {command}'
    # stderr is a pipe, not a terminal: the line is printed when the step starts and when it ends.
    return subprocess.run(
        ["bash", "-c", script, "-", str(tmp_path / "logs" / "x.log")], capture_output=True, text=True, check=False
    )


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
    assert f"compiling the thing failed after 0 s (exit 3); the whole log is {tmp_path}/logs/x.log" in result.stderr
