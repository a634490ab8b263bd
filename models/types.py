"""Constrained scalar types shared by every config model.

Everything a stack file supplies ends up in a shell script, a path or a systemd unit on a host, so the
types below are allow-lists: a value that could change the meaning of a command line or a unit file
(quotes, `$`, backticks, `;`, newlines, `..`) never gets past validation.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, StringConstraints

from models.base import not_true_or_false

# Numbers of the stack file (models/base.py's not_true_or_false: YAML's true and false are refused); their
# bounds are `Field(ge=..., le=...)` where a field uses them.
Int = Annotated[int, BeforeValidator(not_true_or_false)]
Float = Annotated[float, BeforeValidator(not_true_or_false)]

# A name that is safe in a unit name, a path component, a Pulumi resource name and a shell word.
NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9.-]{0,61}[a-z0-9])?$"
MAX_NAME_LENGTH = 63  # NAME_PATTERN's: a DNS label's
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def _check_abs_path(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"{value!r} is not an absolute path; write it starting with '/'")
    parts = value.split("/")[1:]
    if any(part in ("", ".", "..") for part in parts) and value != "/":
        raise ValueError(f"{value!r} has an empty, '.' or '..' component; write a normalized absolute path")
    if not re.fullmatch(r"[A-Za-z0-9._/+-]+", value):
        raise ValueError(
            f"{value!r} has characters that are unsafe in a shell command or unit file; "
            "use only letters, digits and . _ / + -"
        )
    return value


AbsPath = Annotated[str, StringConstraints(max_length=255), AfterValidator(_check_abs_path)]

# Hugging Face repository ids: ORG/NAME with the characters the Hub allows.
HF_REPO_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
HfRepo = Annotated[str, StringConstraints(pattern=HF_REPO_PATTERN)]

# A git revision: a 40-hex commit sha or a branch/tag name without path tricks.
REVISION_PATTERN = r"^(?:[0-9a-f]{40}|[A-Za-z0-9][A-Za-z0-9._-]{0,99})$"
Revision = Annotated[str, StringConstraints(pattern=REVISION_PATTERN)]
PINNED_REVISION = re.compile(r"^[0-9a-f]{40}$")

# Short free text that is printed into unit descriptions and comments.
Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9 ._/()+,:-]{1,120}$")]

# Served model names appear in URLs and JSON; vLLM accepts names like "moonshotai/Kimi-K2.5".
SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/:-]{0,127}$"
ServedName = Annotated[str, StringConstraints(pattern=SERVED_NAME_PATTERN)]
# A model id clients send: a served name, or a model's path (vLLM's id where a launch sets no served name).
ClientModelId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9/][A-Za-z0-9._/:-]{0,255}$")]

ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]{0,127}$"
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN)]
# Environment values go into a systemd EnvironmentFile: no spaces, quotes or expansions needed.
ENV_VALUE_PATTERN = r"^[A-Za-z0-9_.,:=+/@-]{0,512}$"
EnvValue = Annotated[str, StringConstraints(pattern=ENV_VALUE_PATTERN)]

# Engine arguments are passed to execve by systemd, never through a shell, but they are also shown in
# previews and journals; the allow-list keeps JSON values such as '{"level": 3}' possible.
EngineArg = Annotated[str, StringConstraints(pattern=r'^[A-Za-z0-9_.,:=+/@{}\[\]" -]{1,512}$')]
PARSER_NAME_PATTERN = r"^[a-z0-9_]{1,64}$"
ParserName = Annotated[str, StringConstraints(pattern=PARSER_NAME_PATTERN)]
ATTENTION_BACKEND_PATTERN = r"^[A-Z0-9_]{1,64}$"
AttentionBackend = Annotated[str, StringConstraints(pattern=ATTENTION_BACKEND_PATTERN)]

UNIX_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,31}$"
UnixUser = Annotated[str, StringConstraints(pattern=UNIX_USER_PATTERN)]
UNIT_NAME_PATTERN = r"^vllm-[a-z0-9](?:[a-z0-9-]{0,60}[a-z0-9])?$"
UnitStem = Annotated[str, StringConstraints(pattern=UNIT_NAME_PATTERN)]
# `type key [comment]`, as ssh-keyscan and the server's *.pub files print it.
SSH_HOST_KEY_PATTERN = (
    r"^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa) [A-Za-z0-9+/=]{16,2048}( [\x21-\x7e][\x20-\x7e]{0,200})?$"
)
# A known_hosts file on the controller, relative to the project (beside the stack file) or absolute. No
# spaces: OpenSSH's UserKnownHostsFile takes several files separated by them.
KNOWN_HOSTS_PATH_PATTERN = r"^[A-Za-z0-9._/+-]{1,255}$"
KnownHostsPath = Annotated[str, StringConstraints(pattern=KNOWN_HOSTS_PATH_PATTERN)]
VERSION_PATTERN = r"^[0-9][A-Za-z0-9.+-]{0,63}$"
VersionString = Annotated[str, StringConstraints(pattern=VERSION_PATTERN)]

# A service unit's full name, as systemctl prints it (vllm-glm5.service).
SystemdServiceName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,240}\.service$")]

# What each pattern asks for, in words: a config error quotes them beside the pattern (models/loader.py).
PATTERN_WORDS = {
    NAME_PATTERN: f"lowercase letters, digits, '.' and '-', starting and ending with a letter or digit, at most {MAX_NAME_LENGTH} characters",
    HF_REPO_PATTERN: "a Hugging Face repository id, ORG/NAME",
    REVISION_PATTERN: "a 40-hex commit sha (lowercase) or a branch or tag name of letters, digits, '.', '_' and '-'",
    SERVED_NAME_PATTERN: "letters, digits, '.', '_', '/', ':' and '-', starting with a letter or digit",
    ENV_NAME_PATTERN: "UPPER_CASE letters, digits and '_', not starting with a digit",
    ENV_VALUE_PATTERN: "letters, digits and _ . , : = + / @ - only (no spaces, quotes or $)",
    PARSER_NAME_PATTERN: "lowercase letters, digits and '_', as vLLM names its parsers",
    ATTENTION_BACKEND_PATTERN: "UPPER_CASE letters, digits and '_', as vLLM names its backends (e.g. FLASH_ATTN)",
    UNIX_USER_PATTERN: "a Unix user name: lowercase letters, digits, '_' and '-'",
    UNIT_NAME_PATTERN: "vllm- and then lowercase letters, digits and '-' (e.g. vllm-chat)",
    SSH_HOST_KEY_PATTERN: "`TYPE KEY [comment]` as `ssh-keyscan -t ed25519` prints it (ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa)",
    KNOWN_HOSTS_PATH_PATTERN: "a path of letters, digits and . _ / + - (no spaces), beside the stack file or absolute",
    VERSION_PATTERN: "a version starting with a digit, e.g. 0.11.0",
}

# Storage may not be one of these (deleting an unwanted model deletes its directory) nor lie under the trees.
SYSTEM_DIRECTORIES = frozenset({"/home", "/opt", "/root", "/srv", "/mnt", "/media", "/var", "/var/lib", "/tmp"})
SYSTEM_TREES = frozenset(
    {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys", "/usr"}
)


def not_a_system_directory(value: str) -> str:
    """Model directories are deleted when unwanted: they must not be, or lie in, the system's own."""
    top = "/" + value.strip("/").split("/", 1)[0]
    if value == "/" or value in SYSTEM_DIRECTORIES or top in SYSTEM_TREES:
        raise ValueError(
            f"{value!r} is a system directory; models need a directory of their own such as /shared or /data/models"
        )
    return value


HOSTNAME_PATTERN = (
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


def check_address(value: str) -> str:
    """A host's address: an IP address or a DNS host name, as it is."""
    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    if not re.fullmatch(HOSTNAME_PATTERN, value) or len(value) > 253:
        raise ValueError(f"{value!r} is neither an IP address nor a DNS host name")
    return value


def ip_address(value: str, hint: str) -> str:
    """The address in its canonical form, or the error that says it is none."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 or IPv6 address{hint}") from None


# An IP address of a host, kept in its canonical form.
IpAddress = Annotated[str, AfterValidator(lambda value: ip_address(value, ""))]
# The address a listener binds to: one of the host's, or 0.0.0.0 / :: for all of them.
BindAddress = Annotated[str, AfterValidator(lambda value: ip_address(value, " (0.0.0.0 listens on all)"))]
