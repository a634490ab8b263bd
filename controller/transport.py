"""The way the controller reads a host: a module of the host package run in the host's python3 over plain
OpenSSH, the package sent along on stdin (render/host_bundle.bootstrap_source), so nothing needs to be
installed there yet. The survey (controller/survey.py) and `make status` (scripts/status.py) go this way;
pulumi-command's Command does nothing in a preview, hence OpenSSH here, as in controller/probe.py."""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from host.contract import Survey
from models.hosts import Host
from render import host_bundle

SURVEY_MODULE = "host.survey"
# What `make status` runs (installed as TOOLS_DIR/status too, for the post-deploy report).
STATUS_MODULE = "host.status"


class SurveyFailed(Exception):
    pass


def ssh_python(
    host: Host, private_key: str, module: str, args: Sequence[str], timeout: float = 60, what: str = "host/status.py"
) -> str:
    """Run a module of the host package in the host's python3 over plain OpenSSH, the package sent along
    on stdin (nothing needs to be installed there); its stdout. SurveyFailed names the host and `what`."""
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-survey-") as private:
        key_file = Path(private) / "key"
        key_file.touch(mode=0o600)
        key_file.write_text(private_key if private_key.endswith("\n") else private_key + "\n")
        known_hosts = Path(private) / "known_hosts"
        address = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
        known_hosts.write_text(f"{address} {host.host_key}\n" if host.host_key else "")
        command = [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={host.dial_timeout_seconds}",
            "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "StrictHostKeyChecking=" + ("yes" if host.host_key else "no"),
            "-i", str(key_file), "-p", str(host.port), f"{host.user}@{host.address}",
            " ".join(["python3", "-", *(shlex.quote(a) for a in args)]),
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command,
                input=host_bundle.bootstrap_source(module),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SurveyFailed(f"host {host.name!r}: {what} took over {timeout:g} s") from None
    if result.returncode != 0:
        raise SurveyFailed(
            f"host {host.name!r}: {what} failed (exit {result.returncode}): {result.stderr.strip()[-400:]}"
        )
    return result.stdout


def survey_arguments(host: Host, model_dirs: Sequence[str]) -> list[str]:
    """host/survey.py's arguments: the runtime whose vLLM release it reads, the model directories it checks."""
    return ["--python", host.runtime.python, *(a for d in model_dirs for a in ("--model-dir", d))]


def ssh_survey(host: Host, private_key: str, model_dirs: Sequence[str] = (), timeout: float = 60) -> Survey:
    """What runs on `host` now (host/survey.py there), parsed once here into the contract's Survey."""
    text = ssh_python(
        host, private_key, SURVEY_MODULE, survey_arguments(host, model_dirs), timeout, "the survey of what runs there"
    )
    try:
        return Survey.from_json(text)
    except (ValueError, KeyError, TypeError) as error:
        raise SurveyFailed(
            f"host {host.name!r}: the survey's answer is not a survey ({error}): {text[:200]!r}"
        ) from None
