"""host/tools/step.py and host/step.py: a step's command is one call of the host's `step` tool, which binds
the parameters in front of the package's script, passes the step's stdin on, keeps its exit status and stops
it at the step's time limit."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from host import step
from sandbox.processes import run_captured
from tests.support.paths import ROOT


def run_step(tmp_path: Path, body: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """`step` run as the host runs it, with host/steps/NAME.sh replaced by `body` (a copy of the package)."""
    package = tmp_path / "package"
    (package / "host" / "steps").mkdir(parents=True)
    (package / "host" / "tools").mkdir()
    for module in ("__init__.py", "step.py", "processes.py", "tools/__init__.py", "tools/step.py"):
        (package / "host" / module).write_text((ROOT / "host" / module).read_text())
    (package / "host" / "steps" / "probe.sh").write_text(body)
    return run_captured([sys.executable, "-m", "host.tools.step", "probe", *args], cwd=package, input=stdin, timeout=30)


def test_parameters_become_readonly_variables_and_arrays() -> None:
    params = step.parse_params(["A=x y", "LIST[]=one", "LIST[]=two words", "EMPTY[]", "B=$HOME"])
    assert params == {"A": "x y", "LIST": ["one", "two words"], "EMPTY": [], "B": "$HOME"}
    header = step.header("probe", params)
    assert "readonly A='x y'\n" in header and "LIST=(one 'two words')\nreadonly LIST\n" in header
    assert "EMPTY=()\n" in header and "readonly B='$HOME'\n" in header
    with pytest.raises(ValueError, match="not a parameter"):
        step.parse_params(["oops"])
    with pytest.raises(ValueError, match="not a shell variable name"):
        step.header("probe", {"rm -rf": "x"})


def test_the_script_reads_the_steps_stdin_and_keeps_its_exit_status(tmp_path: Path) -> None:
    body = '#!/usr/bin/env bash\nset -euo pipefail\nread -r secret\necho "$WHO got ${#secret} chars"\nexit 3\n'
    result = run_step(tmp_path, body, "--time-limit", "20", "WHO=the step", stdin="s3cret\n")
    assert result.returncode == 3, result.stderr
    assert result.stdout == "the step got 6 chars\n" and "s3cret" not in result.stdout + result.stderr


def test_a_step_past_its_time_limit_is_stopped_with_its_whole_group(tmp_path: Path) -> None:
    marker = tmp_path / "after-sleep"
    body = f"#!/usr/bin/env bash\n(sleep 30; touch {marker}) &\nsleep 30\ntouch {marker}\n"
    started = time.monotonic()
    result = run_step(tmp_path, body, "--time-limit", "1", "--kill-after", "2")
    assert result.returncode == 124, result
    assert "vllm-fleet-probe: stopped by its time limit of 1 s" in result.stderr
    assert time.monotonic() - started < 10
    time.sleep(0.5)
    assert not marker.exists()


def test_every_step_of_the_package_is_a_bash_script() -> None:
    for path in sorted((ROOT / "host" / "steps").glob("*.sh")):
        assert step.body(path.stem).startswith("#!/usr/bin/env bash\n"), path.name
    with pytest.raises(FileNotFoundError, match="no step 'missing'"):
        step.body("missing")
