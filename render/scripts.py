"""The script machinery: a step as one call of the host's `step` tool with its parameters (the body is the
host package's, host/steps/), the scripts that run before the tools exist (installing them, the preflight)
bound and sent whole, and the command string a remote Command runs over SSH for either.

Parameters reach a script as a block of `readonly NAME=<shell-quoted value>` lines in front of its body
(host/step.header, on the host for a step, here for the scripts sent whole), so no value from config is
ever spliced into shell syntax.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from host import step as host_step
from render.paths import TEMPLATES, TOOLS_DIR

ParamValue = str | int | float | bool | Sequence[str]


def _shell_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _params(params: Mapping[str, ParamValue]) -> dict[str, host_step.ParamValue]:
    return {
        key: _shell_value(value) if isinstance(value, str | int | float | bool) else [str(v) for v in value]
        for key, value in params.items()
    }


class Script(str):
    """A rendered script: its text, and, for a step of the host package, its name and parameters, which the
    step's command passes to the host's `step` tool instead of the text (`remote_invocation`)."""

    step: str | None
    params: dict[str, host_step.ParamValue]

    def __new__(
        cls, text: str, step: str | None = None, params: Mapping[str, host_step.ParamValue] | None = None
    ) -> Script:
        made = super().__new__(cls, text)
        made.step = step
        made.params = dict(params or {})
        return made


def script_body(name: str) -> str:
    """A file of render/templates: a template, or the body of a script sent whole."""
    return (TEMPLATES / name).read_text(encoding="utf-8")


def step_script(name: str, params: Mapping[str, ParamValue]) -> Script:
    """A step: host/steps/NAME.sh with its parameters bound, as the host's `step` tool runs it."""
    bound = _params(params)
    return Script(host_step.script(name, bound), name, bound)


def render_script(name: str, params: Mapping[str, ParamValue]) -> Script:
    """A script of render/templates with its parameters bound, sent whole: what runs before the host's
    tools are installed (their install, the preflight) or after they are gone (their removal)."""
    body = script_body(name)
    if not body.startswith("#!/usr/bin/env bash\n"):
        raise ValueError(f"{name} must start with '#!/usr/bin/env bash'")
    return Script(host_step.header(name.removesuffix(".sh"), _params(params)) + body.split("\n", 1)[1])


# Linux's MAX_ARG_STRLEN is 128 KiB per argument; sshd runs a command as `$SHELL -c COMMAND`, and the
# invocation wraps the script once more in `bash -c`. Leave room for the wrapper.
MAX_SCRIPT_BYTES = 120_000


def step_command(script: Script, time_limit_seconds: int, kill_after_seconds: int) -> str:
    """The command of a step: one call of the host's `step` tool, its parameters one to a line (what the
    preview's diff shows change, and all that a failed step echoes besides its output)."""
    assert script.step is not None
    words = [f"{TOOLS_DIR}/step {script.step} --time-limit {time_limit_seconds} --kill-after {kill_after_seconds}"]
    for key, value in script.params.items():
        if isinstance(value, str):
            words.append(shlex.quote(f"{key}={value}"))
        else:
            words += [shlex.quote(f"{key}[]={item}") for item in value] or [f"{key}[]"]
    return " \\\n  ".join(words)


def remote_invocation(script: str, step: str, time_limit_seconds: int, kill_after_seconds: int) -> str:
    """The command string a remote Command runs over SSH for a rendered script.

    A step of the host package is one call of its `step` tool (`step_command`), which runs the body the
    tools step installed, within the time limit. A script sent whole (the tools' install, the preflight)
    travels as an argument of `bash -c` (kept readable in `pulumi preview --diff` by a quoted heredoc),
    which leaves the SSH session's stdin free to carry secrets into the script; coreutils `timeout` bounds
    it on the host (TERM to the script's process group, KILL `kill_after_seconds` later), because
    pulumi-command does not act on the engine's custom timeouts; exit 124 is named.
    """
    if isinstance(script, Script) and script.step is not None:
        command = step_command(script, time_limit_seconds, kill_after_seconds)
    else:
        delimiter = "VLLM_FLEET_SCRIPT"
        if delimiter in script:
            raise ValueError(f"{step}: script contains the delimiter {delimiter}")
        label = shlex.quote("vllm-fleet-" + step)
        command = (
            f"timeout --kill-after={kill_after_seconds} {time_limit_seconds} "
            f"bash -c \"$(cat <<'{delimiter}'\n{script}{delimiter}\n)\" {label} || {{ rc=$?; "
            f'[ "$rc" -ne 124 ] || echo {label}": stopped by its time limit of {time_limit_seconds} s" >&2; '
            f'exit "$rc"; }}'
        )
    if len(command.encode()) > MAX_SCRIPT_BYTES:
        raise ValueError(
            f"{step}: its command is {len(command.encode())} bytes; the remote shell takes the command as one "
            f"argument, at most 128 KiB on Linux: split the step (the limit here is {MAX_SCRIPT_BYTES} bytes)"
        )
    return command
