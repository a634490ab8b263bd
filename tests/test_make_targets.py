"""Every make target the README names works from a fresh clone: the cheap ones run there for real (help,
setup, lint, preview-prod, status, monitoring), the ones that deploy or test (up, test, down, bench) are checked to
be wired to scripts that exist, since running them here would recurse into this very test run.

The clone gets this checkout's built venv and engine (links), as a second `make setup` on one machine
finds them by their stamps; everything else is the clone's own."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sandbox.processes import run_captured
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("pulumi_engine")

README_TARGETS = sorted(set(re.findall(r"`make ([a-z-]+)", (ROOT / "README.md").read_text())))
MAKEFILE_TARGETS = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), re.M))
DEPLOYING = ("up", "test", "down", "bench")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fresh") / "vllm-fleet"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(path)], check=True, timeout=120)
    for built in (".venv", ".tools"):
        (path / built).symlink_to(ROOT / built)
    return path


def make(clone: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # A shell of a fresh machine: none of this checkout's engine on PATH, nothing of its environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "VLLM_FLEET_"))}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.endswith("/.tools/bin"))
    # The engine's upstream sources sit beside this checkout, not beside the clone.
    env["VLLM_FLEET_VENDOR_DIR"] = os.environ.get("VLLM_FLEET_VENDOR_DIR", str(ROOT.parent / "shared" / "vendor"))
    return run_captured(["make", *args], cwd=clone, env=env, timeout=timeout)


def test_the_readme_names_only_targets_that_exist() -> None:
    assert {"up", "test", "down", "bench", "preview-prod", "status", "setup"} <= set(README_TARGETS)
    assert set(README_TARGETS) <= MAKEFILE_TARGETS, set(README_TARGETS) - MAKEFILE_TARGETS


def test_help_setup_and_lint_run_in_a_fresh_clone(clone: Path) -> None:
    assert "make up" in make(clone, "help").stdout
    setup = make(clone, "setup")
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert "engine ready" in setup.stdout + setup.stderr and "==> setup: done" in setup.stdout
    lint = make(clone, "lint")
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_preview_prod_runs_in_a_fresh_clone(clone: Path) -> None:
    result = make(clone, "preview-prod")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"\+ \d+ to create", result.stdout), result.stdout[-2000:]
    assert "primary-serving" in result.stdout
    # Offline: nothing in the clone changed, no stack state appeared.
    status = run_captured(["git", "status", "--porcelain"], cwd=clone, check=True)
    assert [line for line in status.stdout.splitlines() if not line.endswith((".venv", ".tools"))] == []


@pytest.mark.parametrize(
    ("target", "says", "streams"),
    [
        ("status", "no deployments", ("stdout", "stderr")),
        ("monitoring", "run `pulumi up` first", ("stdout",)),
    ],
)
def test_a_target_on_a_stack_that_was_never_deployed_says_so(
    clone: Path, target: str, says: str, streams: tuple[str, ...]
) -> None:
    make(clone, "setup")
    result = make(clone, target)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert says in "".join(getattr(result, stream) for stream in streams)


@pytest.mark.parametrize("target", DEPLOYING)
def test_deploying_targets_are_wired_to_scripts_that_exist(clone: Path, target: str) -> None:
    plan = make(clone, "-n", target)
    assert plan.returncode == 0, plan.stderr
    scripts = re.findall(r"scripts/[\w.-]+\.sh|-m (bench\.run)", plan.stdout)
    assert scripts, plan.stdout
    for script in re.findall(r"scripts/[\w.-]+\.sh", plan.stdout):
        # env.sh is sourced; the others run
        assert (clone / script).is_file() and (script.endswith("env.sh") or os.access(clone / script, os.X_OK))


def test_make_test_runs_a_test_that_needs_the_sandbox_only_in_the_end_to_end_lane() -> None:
    """The two lanes of `make test` split on the e2e mark, which tests/conftest.py gives every test that uses
    the sandbox: none of tests/test_downtime.py's (no module mark of its own) may land in the lane beside."""
    pytest_bin = ROOT / ".venv" / "bin" / "pytest"
    args = [str(pytest_bin), "-p", "no:cacheprovider", "--collect-only", "-q", "tests/test_downtime.py"]
    beside = run_captured([*args, "-m", "not e2e"], cwd=ROOT, timeout=120)
    alone = run_captured([*args, "-m", "e2e"], cwd=ROOT, timeout=120)
    assert "test_blue_green_swap_and_back_fail_no_request" not in beside.stdout, beside.stdout
    assert "test_blue_green_swap_and_back_fail_no_request" in alone.stdout, alone.stdout
