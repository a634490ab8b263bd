"""The script machinery: a script body from components/files with its parameters bound, files written by
heredoc, and the command string that runs a script over SSH.

Parameters reach a script as a block of `readonly NAME=<shell-quoted value>` lines in front of its body,
so no value from config is ever spliced into shell syntax.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from render.paths import FILES

HEREDOC_DELIMITER = "VLLM_FLEET_EOF"


def script_body(name: str) -> str:
    return (FILES / name).read_text(encoding="utf-8")


ParamValue = str | int | float | bool | Sequence[str]


def _shell_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return shlex.quote(value)
    return "(" + " ".join(shlex.quote(v) for v in value) + ")"


def render_script(name: str, params: Mapping[str, ParamValue]) -> str:
    """A script body from components/files with its parameters bound as readonly shell variables."""
    body = script_body(name)
    if not body.startswith("#!/usr/bin/env bash\n"):
        raise ValueError(f"{name} must start with '#!/usr/bin/env bash'")
    header_lines = ["#!/usr/bin/env bash", f"# vllm-fleet {name}: parameters rendered from the stack config"]
    for key, value in params.items():
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise ValueError(f"parameter name {key!r} is not a shell variable name")
        if isinstance(value, str) and ("$" in value or "`" in value):
            header_lines.append("# shellcheck disable=SC2016  # data, never expanded")
        if isinstance(value, str | int | float | bool):
            header_lines.append(f"readonly {key}={_shell_value(value)}")
        else:
            header_lines.append(f"{key}={_shell_value(value)}")
            header_lines.append(f"readonly {key}")
    return "\n".join(header_lines) + "\n" + body.split("\n", 1)[1]


def heredoc_file(path: str, content: str, mode: str) -> str:
    """Shell lines that write `content` to `path` atomically (temp file, then rename) with `mode`."""
    if HEREDOC_DELIMITER in content:
        raise ValueError(f"{path}: content contains the heredoc delimiter {HEREDOC_DELIMITER}")
    tmp = f"{path}.vllm-fleet-tmp"
    text = content if content.endswith("\n") else content + "\n"
    return (
        f"install -d -m 0755 {shlex.quote(str(Path(path).parent))}\n"
        f"cat > {shlex.quote(tmp)} <<'{HEREDOC_DELIMITER}'\n{text}{HEREDOC_DELIMITER}\n"
        f"chmod {mode} {shlex.quote(tmp)}\n"
        f"mv -f {shlex.quote(tmp)} {shlex.quote(path)}\n"
    )


# Linux's MAX_ARG_STRLEN is 128 KiB per argument; sshd runs a command as `$SHELL -c COMMAND`, and the
# invocation wraps the script once more in `bash -c`. Leave room for the wrapper.
MAX_SCRIPT_BYTES = 120_000


def remote_invocation(script: str, step: str, time_limit_seconds: int, kill_after_seconds: int) -> str:
    """The command string a remote Command runs over SSH for a rendered script.

    The script travels as an argument of `bash -c` (kept readable in `pulumi preview --diff` by a quoted
    heredoc), which leaves the SSH session's stdin free to carry secrets into the script. coreutils
    `timeout` bounds it on the host (TERM to the script's process group, KILL `kill_after_seconds`
    later), because pulumi-command does not act on the engine's custom timeouts; exit 124 is named.
    """
    delimiter = "VLLM_FLEET_SCRIPT"
    if delimiter in script:
        raise ValueError(f"{step}: script contains the delimiter {delimiter}")
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise ValueError(
            f"{step}: its script is {len(script.encode())} bytes; the remote shell takes the command as one "
            f"argument, at most 128 KiB on Linux: split the step (the limit here is {MAX_SCRIPT_BYTES} bytes)"
        )
    label = shlex.quote("vllm-fleet-" + step)
    return (
        f"timeout --kill-after={kill_after_seconds} {time_limit_seconds} "
        f"bash -c \"$(cat <<'{delimiter}'\n{script}{delimiter}\n)\" {label} || {{ rc=$?; "
        f'[ "$rc" -ne 124 ] || echo {label}": stopped by its time limit of {time_limit_seconds} s" >&2; '
        f'exit "$rc"; }}'
    )
