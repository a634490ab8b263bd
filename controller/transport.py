"""The way the controller reads a host: a module of the host package run in the host's python3 over plain
OpenSSH, the package sent along on stdin (render/host_bundle.bootstrap_source), so nothing needs to be
installed there yet. The survey (controller/survey.py) and `make status` (scripts/status.py) go this way;
pulumi-command's Command does nothing in a preview, hence OpenSSH here, as in controller/probe.py.

The server's key is checked as the steps' client would refuse it: against the stack's known_hosts file as it
is (vllm-fleet:knownHostsFile, every key it lists for the host), else the host's hostKey alone, never a
machine-wide file, and ssh never writes one (controller/known_hosts.known_hosts_options); a key the server
no longer shows fails naming the host and the fix (key_refusal)."""

from __future__ import annotations

import json
import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from controller.known_hosts import key_refusal, known_hosts_options
from host.contract import LaunchQuestion, Survey
from host.processes import run_captured
from models.hosts import Host
from render import host_bundle

SURVEY_MODULE = "host.tools.survey"
# What `make status` runs (installed as TOOLS_DIR/status too, for the post-deploy report).
STATUS_MODULE = "host.tools.status"


class SurveyFailed(Exception):
    pass


def ssh_python(
    host: Host,
    private_key: str,
    module: str,
    args: Sequence[str],
    timeout: float = 60,
    what: str = "host/tools/status.py",
    known_hosts: Path | None = None,
) -> str:
    """Run a module of the host package in the host's python3 over plain OpenSSH, the package sent along
    on stdin (nothing needs to be installed there); its stdout. The server's key is checked against
    `known_hosts` as it is (the stack's file), else against the host's hostKey alone; with neither, any key
    is accepted (a development host). SurveyFailed names the host and `what`, or the changed key's fix."""
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-survey-") as private:
        key_file = Path(private) / "key"
        key_file.touch(mode=0o600)
        key_file.write_text(private_key if private_key.endswith("\n") else private_key + "\n")
        command = [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={host.dial_timeout_seconds}",
            "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR",
            *known_hosts_options(host, known_hosts, Path(private) / "known_hosts"),
            "-i", str(key_file), "-p", str(host.port), f"{host.user}@{host.address}",
            " ".join(["python3", "-", *(shlex.quote(a) for a in args)]),
        ]  # fmt: skip
        try:
            result = run_captured(command, timeout=timeout, input=host_bundle.bootstrap_source(module))
        except subprocess.TimeoutExpired:
            raise SurveyFailed(f"host {host.name!r}: {what} took over {timeout:g} s") from None
    if result.returncode != 0:
        if (refused := key_refusal(host, result.stderr, known_hosts)) is not None:
            raise SurveyFailed(refused)
        raise SurveyFailed(
            f"host {host.name!r}: {what} failed (exit {result.returncode}): {result.stderr.strip()[-400:]}"
        )
    return result.stdout


def survey_arguments(host: Host, model_dirs: Sequence[str], questions: Sequence[LaunchQuestion] = ()) -> list[str]:
    """host/tools/survey.py's arguments: the runtime whose vLLM release it reads, the model directories it checks,
    and per deployment the stack's launch its serving engine is compared with."""
    return [
        "--python",
        host.runtime.python,
        *(a for d in model_dirs for a in ("--model-dir", d)),
        *(a for q in questions for a in ("--question", json.dumps(q.to_dict(), sort_keys=True))),
    ]


# The survey's time on the host: ~0.1-0.3 s, and the seconds of vLLM's import when it reads a launch it has
# not read before (engine_launch.PARSE_TIMEOUT at most).
SURVEY_TIMEOUT = 180.0


def ssh_survey(
    host: Host,
    private_key: str,
    model_dirs: Sequence[str] = (),
    timeout: float = SURVEY_TIMEOUT,
    known_hosts: Path | None = None,
    questions: Sequence[LaunchQuestion] = (),
) -> Survey:
    """What runs on `host` now (host/tools/survey.py there), parsed once here into the contract's Survey."""
    text = ssh_python(
        host,
        private_key,
        SURVEY_MODULE,
        survey_arguments(host, model_dirs, questions),
        timeout,
        "the survey of what runs there",
        known_hosts,
    )
    try:
        return Survey.from_json(text)
    except (ValueError, KeyError, TypeError) as error:
        raise SurveyFailed(
            f"host {host.name!r}: the survey's answer is not a survey ({error}): {text[:200]!r}"
        ) from None
