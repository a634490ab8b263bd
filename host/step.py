"""A step's script: one glue script of the host package (host/steps/NAME.sh) behind the readonly shell
variables its parameters become. The `step` tool (host/tools/step.py) runs it on the host, and render/scripts.py
renders the same script on the controller's side. Standard library only.
"""

from __future__ import annotations

import pkgutil
import re
import shlex
from collections.abc import Mapping, Sequence

ParamValue = str | Sequence[str]
_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def body(name: str) -> str:
    """The step's script as the package ships it (host/steps/NAME.sh)."""
    try:
        data = pkgutil.get_data("host", f"steps/{name}.sh")
    except OSError:
        data = None
    if data is None:
        raise FileNotFoundError(f"the host package has no step {name!r}")
    return data.decode("utf-8")


def header(name: str, params: Mapping[str, ParamValue]) -> str:
    """The shell lines that bind `params` as readonly variables, in order."""
    lines = ["#!/usr/bin/env bash", f"# vllm-fleet {name}.sh: parameters rendered from the stack config"]
    for key, value in params.items():
        if not _NAME.fullmatch(key):
            raise ValueError(f"parameter name {key!r} is not a shell variable name")
        if isinstance(value, str):
            if "$" in value or "`" in value:
                lines.append("# shellcheck disable=SC2016  # data, never expanded")
            lines.append(f"readonly {key}={shlex.quote(value)}")
        else:
            lines.append(f"{key}=(" + " ".join(shlex.quote(v) for v in value) + ")")
            lines.append(f"readonly {key}")
    return "\n".join(lines) + "\n"


def script(name: str, params: Mapping[str, ParamValue]) -> str:
    """The whole script the step runs: the parameters' header, then the body after its first line."""
    text = body(name)
    if not text.startswith("#!/usr/bin/env bash\n"):
        raise ValueError(f"host/steps/{name}.sh must start with '#!/usr/bin/env bash'")
    return header(name, params) + text.split("\n", 1)[1]


def parse_params(words: Sequence[str]) -> dict[str, ParamValue]:
    """KEY=VALUE words as scalars, KEY[]=VALUE words as the items of an array KEY, a bare KEY[] as an
    empty array."""
    params: dict[str, ParamValue] = {}
    for word in words:
        key, equals, value = word.partition("=")
        if key.endswith("[]"):
            items = params.setdefault(key[:-2], [])
            if not isinstance(items, list):
                raise ValueError(f"parameter {key[:-2]} is given as a value and as an array")
            if equals:
                items.append(value)
        elif equals:
            params[key] = value
        else:
            raise ValueError(f"not a parameter: {word!r} (KEY=VALUE, KEY[]=VALUE or KEY[])")
    return params
