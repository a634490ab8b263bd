"""What a host's SSH host key is looked up by, and the words of the refusals about it: a production host
with no key (models/rules.py without vllm-fleet:knownHostsFile, controller/known_hosts.py with it) and a
key that changed (controller/known_hosts.py, from the survey's ssh)."""

from __future__ import annotations

import base64
import hashlib

from models.hosts import DEFAULT_SSH_PORT, Host


def lookup_name(address: str, port: int) -> str:
    """The name OpenSSH looks a host up by in known_hosts: the address as given (lowercased, as `ssh` does),
    `[address]:port` for a port other than 22."""
    name = address.lower()
    return name if port == DEFAULT_SSH_PORT else f"[{name}]:{port}"


def host_lookup_name(host: Host) -> str:
    return lookup_name(host.address, host.port)


def fingerprint(key: str) -> str:
    """OpenSSH's SHA256 fingerprint of a key (`TYPE BASE64 [comment]`, or the base64 alone), as
    `ssh-keygen -l` prints it."""
    blob = key.split()[1] if " " in key.strip() else key.strip()
    digest = hashlib.sha256(base64.b64decode(blob)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def key_fix(host: Host, known_hosts_file: str | None) -> str:
    """How `host` gets its key (again, after a rotation): a line in the stack's known_hosts file, or its own
    hostKey when the stack names no file."""
    scan = f"ssh-keyscan -t ed25519 -p {host.port} {host.address}"
    checked = "checked against the server's own /etc/ssh/ssh_host_ed25519_key.pub"
    if known_hosts_file is None:
        return f"set vllm-fleet:hosts[{host.name}].hostKey to the `ssh-ed25519 AAAA...` line `{scan}` prints, {checked}"
    return (
        f"run `ssh-keygen -R '{host_lookup_name(host)}' -f {known_hosts_file}` (it removes the host's old lines), "
        f"then `{scan} >> {known_hosts_file}`: the new line {checked}, and reviewed like the stack file"
    )


def missing_host_key(host: Host, known_hosts_file: str | None) -> str:
    """A production host with a key from neither place: the host, both keys, and the fix."""
    file_says = (
        f"vllm-fleet:knownHostsFile ({known_hosts_file}) has no line for {host_lookup_name(host)}"
        if known_hosts_file is not None
        else "no vllm-fleet:knownHostsFile is set"
    )
    return (
        f"vllm-fleet:hosts[{host.name}].hostKey: host {host.name!r} has no SSH host key: hosts[{host.name}].hostKey "
        f"is not set and {file_says}. A production stack pins each host's key, so that no step runs on a machine "
        f"that answers in its place: {key_fix(host, known_hosts_file)}"
        + (
            "; or name a known_hosts file with vllm-fleet:knownHostsFile (a fleet keeps its keys there)"
            if known_hosts_file is None
            else ""
        )
    )
