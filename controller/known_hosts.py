"""Host keys from a known_hosts file (`vllm-fleet:knownHostsFile`): where SSH keeps them, reviewed beside
the stack file, hashed names (`|1|salt|hash`) or not, `[address]:port` for another port than 22.

Two clients read it, differently:
- the survey's plain OpenSSH (controller/survey.py) uses the file as it is: every key a host has there
  (ed25519, ECDSA, RSA), as `ssh` accepts them;
- the steps' client, pulumi-command's Go SSH (golang.org/x/crypto/ssh), takes one key per connection
  (`connection.hostKey` becomes `ssh.FixedHostKey`, and the client then offers the server that key's type
  alone as its host key algorithm). A host's steps get its key of the first type in the order ed25519,
  ECDSA (nistp256, nistp384, nistp521), RSA: OpenSSH's own order of preference among plain keys. Two
  different keys of that type for one host are refused (only one can be pinned), as are `@cert-authority`
  and `@revoked` lines (the steps cannot check a certificate nor honour a revocation): each is refused
  with its file and line, never skipped.
A host's own `hosts[].hostKey` wins over the file.

Every line is read here, in Python, and checked against OpenSSH's own reading (`ssh-keygen -lf`, one
process for the whole file: 8 ms for 1,024 keys on an idle machine): a line OpenSSH skips is refused with
its line number; the whole read is 20-40 ms a run at 1,024 hosts (make bench ARGS=fleet).
Which lines name a host is this module's answer too (OpenSSH's rules: patterns with `*`, `?` and `!`,
case-insensitive names, HMAC-SHA1 of the name for hashed lines): asking `ssh-keygen -F` per host took 5-7
s for 1,024 hosts on a 2-core machine, in every run of the program; tests/test_known_hosts.py holds this
module to `ssh-keygen -F`'s answers on the same files.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re
import struct
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from host.contract import Survey
from models.config import StackConfig, StackTier
from models.host_keys import fingerprint, host_lookup_name, key_fix, missing_host_key
from models.hosts import Host

NAMESPACE_KEY = "vllm-fleet:knownHostsFile"
# The key types a step can pin, in the order its key is chosen (OpenSSH's own order of preference).
PIN_ORDER = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")
# What each marker means to OpenSSH, and why the steps cannot honour it.
MARKERS = {
    "@cert-authority": (
        "a certificate authority's key: pulumi-command's client pins one plain host key per connection and "
        "cannot check a host certificate; list each host's own key instead (`ssh-keyscan -t ed25519 ADDRESS`)"
    ),
    "@revoked": (
        "a revoked key: the steps pin the one key listed for a host and accept it, revoked or not; remove the "
        "revoked key's own lines and this one (a key is revoked here by not listing it)"
    ),
}
HASHED_PREFIX = "|1|"


class KnownHostsError(Exception):
    """The file cannot be used as it is; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class KeyLine:
    """One key line of a known_hosts file."""

    number: int
    hosts: str
    key_type: str
    blob: str

    @property
    def key(self) -> str:
        """`TYPE BASE64`, as `connection.hostKey` and the hostKey config key take it."""
        return f"{self.key_type} {self.blob}"

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)


def _ssh_string(data: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(data):
        raise ValueError("short")
    (length,) = struct.unpack(">I", data[offset : offset + 4])
    end = offset + 4 + length
    if end > len(data):
        raise ValueError("short")
    return data[offset + 4 : end], end


def _blob_type(blob: str) -> str | None:
    """The key type a base64 key blob says it is (its first string), or None when it is no key blob."""
    try:
        data = base64.b64decode(blob, validate=True)
        name, _ = _ssh_string(data, 0)
        return name.decode("ascii")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None


def _pattern(text: str) -> re.Pattern[str]:
    """One OpenSSH host pattern: `*` any run, `?` one character, everything else itself (brackets too)."""
    parts = (".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text.lower())
    return re.compile("".join(parts), re.DOTALL)


@dataclass(frozen=True)
class _Patterned:
    line: KeyLine
    patterns: tuple[tuple[bool, re.Pattern[str]], ...]  # (negated, pattern)

    def matches(self, name: str) -> bool:
        """OpenSSH's match_hostname: no negated pattern matches, and a positive one does."""
        positive = False
        for negated, pattern in self.patterns:
            if pattern.fullmatch(name):
                if negated:
                    return False
                positive = True
        return positive


@dataclass(frozen=True)
class _Hashed:
    line: KeyLine
    salt: bytes
    digest: bytes

    def matches(self, name: str) -> bool:
        return hmac.compare_digest(hmac.digest(self.salt, name.encode(), "sha1"), self.digest)


@dataclass(frozen=True)
class KnownHosts:
    """A parsed known_hosts file and the lines by which it names hosts."""

    path: Path
    lines: tuple[KeyLine, ...]
    exact: Mapping[str, tuple[KeyLine, ...]] = field(default_factory=dict)
    patterned: tuple[_Patterned, ...] = ()
    hashed: tuple[_Hashed, ...] = ()

    def keys_for(self, names: Sequence[str]) -> dict[str, list[KeyLine]]:
        """Every key line that names each host (by its lookup_name), in file order."""
        found: dict[str, list[KeyLine]] = {name: list(self.exact.get(name, ())) for name in names}
        for entry in self.patterned:
            for name in names:
                if entry.matches(name):
                    found[name].append(entry.line)
        # A hashed line names one host, found only by hashing each name with the line's salt: all pairs
        # for a whole fleet (1,024 x 1,024 HMACs, 2 s in Python). Files list hosts in some order, mostly
        # the inventory's: each line is tried first against the names after the last one found.
        cursor = 0
        for hashed in self.hashed:
            for step in range(len(names)):
                name = names[(cursor + step) % len(names)]
                if hashed.matches(name):
                    found[name].append(hashed.line)
                    cursor = (cursor + step + 1) % len(names)
                    break
        for lines in found.values():
            lines.sort(key=lambda line: line.number)
        return found


def parse(text: str, path: Path) -> KnownHosts:
    """The file's key lines; KnownHostsError naming each line that is refused (markers, lines OpenSSH
    would skip)."""
    problems: list[str] = []
    lines: list[KeyLine] = []
    exact: dict[str, list[KeyLine]] = {}
    patterned: list[_Patterned] = []
    hashed: list[_Hashed] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{path}:{number}"
        fields = stripped.split()
        if fields[0] in MARKERS:
            problems.append(f"{where}: {fields[0]} lines are refused: {MARKERS[fields[0]]}")
            continue
        if fields[0].startswith("@"):
            problems.append(f"{where}: unknown marker {fields[0]}; OpenSSH skips the line. Remove it")
            continue
        if len(fields) < 3:
            problems.append(f"{where}: not a `HOSTS TYPE KEY` line; OpenSSH skips it. Fix or remove it")
            continue
        hosts, key_type, blob = fields[0], fields[1], fields[2]
        inner = _blob_type(blob)
        if inner != key_type:
            said = "is no base64 key" if inner is None else f"is a {inner} key"
            problems.append(
                f"{where}: the key {said}, not {key_type}; OpenSSH skips the line. Replace it with the line "
                "`ssh-keyscan` prints for the host"
            )
            continue
        line = KeyLine(number, hosts, key_type, blob)
        if hosts.startswith(HASHED_PREFIX):
            parts = hosts.split("|")
            try:
                salt, digest = base64.b64decode(parts[2], validate=True), base64.b64decode(parts[3], validate=True)
                if len(parts) != 4 or len(digest) != 20:
                    raise ValueError("not an HMAC-SHA1 name")
            except (IndexError, binascii.Error, ValueError):
                problems.append(f"{where}: a hashed name must be |1|SALT|HASH (ssh-keygen -H writes them); fix it")
                continue
            hashed.append(_Hashed(line, salt, digest))
        elif any(c in hosts for c in "*?!"):
            patterns = tuple((p.startswith("!"), _pattern(p.removeprefix("!"))) for p in hosts.split(",") if p)
            patterned.append(_Patterned(line, patterns))
        else:
            for name in hosts.lower().split(","):
                if name:
                    exact.setdefault(name, []).append(line)
        lines.append(line)
    if problems:
        raise KnownHostsError("\n".join(problems))
    return KnownHosts(
        path=path,
        lines=tuple(lines),
        exact={name: tuple(found) for name, found in exact.items()},
        patterned=tuple(patterned),
        hashed=tuple(hashed),
    )


def openssh_fingerprints(path: Path) -> list[str]:
    """The fingerprint of every key line OpenSSH reads in the file, in file order (`ssh-keygen -lf`)."""
    try:
        result = subprocess.run(
            ["ssh-keygen", "-l", "-f", str(path)], capture_output=True, text=True, timeout=60, check=False
        )
    except FileNotFoundError:
        raise KnownHostsError(
            f"{NAMESPACE_KEY}: ssh-keygen is not installed on this machine; install OpenSSH's client "
            "(Debian: openssh-client), which the preview's survey needs too"
        ) from None
    return [fields[1] for fields in (line.split() for line in result.stdout.splitlines()) if len(fields) >= 2]


def check_with_openssh(known: KnownHosts, openssh: Iterable[str]) -> None:
    """Refuse each line that this module read as a key but OpenSSH does not (`openssh`: the fingerprints
    ssh-keygen -lf printed, in file order), naming it."""
    theirs = list(openssh)
    at = 0
    problems = []
    for line in known.lines:
        if at < len(theirs) and theirs[at] == line.fingerprint:
            at += 1
        else:
            problems.append(
                f"{known.path}:{line.number}: OpenSSH cannot read this {line.key_type} key (`ssh-keygen -lf` skips "
                "it); replace it with the line `ssh-keyscan` prints for the host"
            )
    if problems:
        raise KnownHostsError("\n".join(problems))


def read(path: Path) -> KnownHosts:
    """The file at `path`, parsed and checked against OpenSSH's reading."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise KnownHostsError(
            f"{NAMESPACE_KEY}: cannot read {path} ({error.strerror or error}); write the hosts' keys there "
            "(`ssh-keyscan -t ed25519 -p PORT ADDRESS >> FILE` for each, checked against the server's "
            "/etc/ssh/ssh_host_ed25519_key.pub), or fix the path"
        ) from None
    known = parse(text, path)
    check_with_openssh(known, openssh_fingerprints(path))
    return known


def pin(lines: Sequence[KeyLine]) -> KeyLine | None:
    """The key a host's steps pin, among its lines: of the first type of PIN_ORDER it has one of. None
    when it has no key of those types; KnownHostsError when it has two different keys of that type."""
    for key_type in PIN_ORDER:
        of_type = [line for line in lines if line.key_type == key_type]
        if len({line.blob for line in of_type}) > 1:
            numbers = ", ".join(str(line.number) for line in of_type)
            raise KnownHostsError(
                f"lines {numbers} give different {key_type} keys, and the steps pin one; keep the one the server "
                "shows now (check /etc/ssh/ssh_host_*_key.pub on it) and remove the others"
            )
        if of_type:
            return of_type[0]
    return None


@dataclass(frozen=True)
class Pin:
    """The key a host's steps pin, and where it came from."""

    key: str
    # The file's line, or None for the host's own hostKey.
    line: KeyLine | None = None

    @property
    def key_type(self) -> str:
        return self.key.split()[0]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)


@dataclass(frozen=True)
class HostKeys:
    """The stack's known_hosts file (None without vllm-fleet:knownHostsFile) and each host's pin."""

    file: Path | None = None
    pins: Mapping[str, Pin] = field(default_factory=dict)

    def survey_file(self, host: Host) -> Path | None:
        """The file the survey's ssh checks `host` against: the stack's, when the host's key came from it."""
        pinned = self.pins.get(host.name)
        return self.file if pinned is not None and pinned.line is not None else None


def rsa_note(host: Host, line: KeyLine, shown: str) -> str:
    """An RSA pin works only where the server still offers SHA-1 RSA signatures."""
    return (
        f"host {host.name!r}: its steps pin its RSA key (line {line.number} of {shown}), the only type the file "
        "lists for it. pulumi-command's Go client then offers the server `ssh-rsa` (SHA-1 signatures) alone, which "
        "OpenSSH 8.8 and later refuse unless sshd_config has `HostKeyAlgorithms +ssh-rsa`: its steps would fail "
        f"with 'no common algorithm for host key'. Add the host's ed25519 key: "
        f"`ssh-keyscan -t ed25519 -p {host.port} {host.address} >> {shown}`"
    )


def resolve(config: StackConfig, root: Path) -> tuple[StackConfig, HostKeys, list[str]]:
    """Each host's pin: its own hostKey, else its key of the stack's known_hosts file (PIN_ORDER). Returns
    the config with each host's hostKey set to its pin (what the steps' connection, the survey's cache key
    and the post-deploy report read), the pins, and warnings for the preview. KnownHostsError: the file's
    problems, and each production host with a key from neither place."""
    if config.known_hosts_file is None:
        own = {h.name: Pin(h.host_key) for h in config.hosts if h.host_key is not None}
        return config, HostKeys(None, own), []
    shown = config.known_hosts_file
    path = Path(shown) if shown.startswith("/") else root / shown
    known = read(path)
    found = known.keys_for([host_lookup_name(h) for h in config.hosts if h.host_key is None])
    pins: dict[str, Pin] = {}
    problems: list[str] = []
    notes: list[str] = []
    hosts: list[Host] = []
    for host in config.hosts:
        if host.host_key is not None:
            pins[host.name] = Pin(host.host_key)
            hosts.append(host)
            continue
        try:
            chosen = pin(found[host_lookup_name(host)])
        except KnownHostsError as error:
            problems.append(f"{shown}: host {host.name!r} ({host_lookup_name(host)}): {error}")
            chosen = None
        if chosen is None:
            if config.tier is StackTier.PRODUCTION:
                problems.append(missing_host_key(host, shown))
            elif not problems:
                notes.append(
                    f"host {host.name!r}: {shown} has no line for {host_lookup_name(host)}; its steps and survey accept "
                    "any host key (a development stack). To pin it: " + key_fix(host, shown)
                )
            hosts.append(host)
            continue
        pins[host.name] = Pin(chosen.key, chosen)
        if chosen.key_type == "ssh-rsa":
            notes.append(rsa_note(host, chosen, shown))
        try:
            # Validated as the host's own hostKey would be (model_copy validates nothing): a key OpenSSH reads
            # may still be longer than hostKey's pattern allows.
            hosts.append(Host.model_validate({**host.model_dump(), "host_key": chosen.key}))
        except ValidationError:
            problems.append(
                f"{shown}:{chosen.number}: host {host.name!r} ({host_lookup_name(host)}): its {chosen.key_type} key is "
                "not one vllm-fleet:hosts[].hostKey takes (`TYPE BASE64`, at most 2,048 characters of base64): "
                + key_fix(host, shown)
            )
            hosts.append(host)
    if problems:
        raise KnownHostsError("\n".join(problems))
    # Not validated again (model_copy): the hosts are the same but for the keys validated above, and the rules
    # across keys (models/rules.py) ran on the config the loader returned.
    return config.model_copy(update={"hosts": tuple(hosts)}), HostKeys(path, pins), notes


def known_hosts_options(host: Host, known_hosts: Path | None, scratch: Path) -> list[str]:
    """The survey's `ssh -o` options for the server's key: the stack's file as it is (`known_hosts`), or a
    file of the host's own hostKey written at `scratch`; no key: any is accepted (a development host). No
    machine-wide known_hosts adds a key the steps would refuse, and ssh never writes to the file."""
    options = ["-o", "GlobalKnownHostsFile=/dev/null", "-o", "UpdateHostKeys=no", "-o", "CheckHostIP=no"]
    if known_hosts is not None:
        return [*options, "-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
    scratch.write_text(f"{host_lookup_name(host)} {host.host_key}\n" if host.host_key else "")
    strict = "yes" if host.host_key else "no"
    return [*options, "-o", f"UserKnownHostsFile={scratch}", "-o", f"StrictHostKeyChecking={strict}"]


# What OpenSSH prints when the server's key is not the one it knows for the host.
VERIFICATION_FAILED = "Host key verification failed."
SENT_KEY = re.compile(r"The fingerprint for the (\S+) key sent by the remote host is\s+(SHA256:[A-Za-z0-9+/]+)")


def key_refusal(host: Host, stderr: str, known_hosts: Path | None) -> str | None:
    """The survey's ssh refused the server's host key: what that means and the fix (None: it did not)."""
    if VERIFICATION_FAILED not in stderr:
        return None
    where = f"{host.user}@{host.address}:{host.port}"
    listed = str(known_hosts) if known_hosts is not None else f"vllm-fleet:hosts[{host.name}].hostKey"
    shown = SENT_KEY.search(stderr)
    if shown is not None:
        seen = f"it showed the {shown.group(1)} key {shown.group(2)}, which {listed} does not list for it"
    else:
        seen = f"it showed no key that {listed} lists for it (OpenSSH: {stderr.strip().splitlines()[-2:]!r})"
    return (
        f"host {host.name!r} ({where}): its SSH host key changed: {seen}. Either the server's key was replaced, or "
        "another machine answers at its address; nothing ran there. If the change is expected (compare with the "
        f"key on the server itself), {key_fix(host, str(known_hosts) if known_hosts is not None else None)}. The "
        "next `pulumi up` then runs each of the host's steps once more, with the new key; they find nothing to do"
    )


def changed_note(stack: str, host: Host, host_keys: HostKeys, found: Survey) -> str | None:
    """When the host's steps pinned another key at the stack's last preflight there (the survey reads the
    record): the preview says so, since each of the host's steps runs once more with the new key."""
    before = found.host_keys.get(stack)
    pinned = host_keys.pins.get(host.name)
    now = pinned.fingerprint if pinned is not None else "none"
    if before is None or before == now:
        return None
    source = (
        "no key: any is accepted"
        if pinned is None
        else f"{pinned.key_type}, from line {pinned.line.number} of {host_keys.file}"
        if pinned.line is not None
        else f"{pinned.key_type}, from vllm-fleet:hosts[{host.name}].hostKey"
    )
    was = "any key" if before == "none" else before
    return (
        f"host {host.name!r}: host key changed: its steps pinned {was} at the last `pulumi up` and now pin {now} "
        f"({source}). Each of its steps updates once to connect with the new key; their scripts check before "
        "they act and find nothing to do (no engine restarts)"
    )
