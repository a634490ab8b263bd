"""Host keys from a known_hosts file (controller/known_hosts.py), held to OpenSSH's own answers: which lines
name a host (`ssh-keygen -F`, hashed names included) and which lines are keys at all (`ssh-keygen -lf`) on
the same files; the key each host's steps pin; the refusals (markers, a production host with no key, a key
that changed) and what they name; the program under mocks with a fleet whose keys come from the file."""

from __future__ import annotations

import base64
import itertools
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from controller import known_hosts as kh
from host.contract import Survey
from models.config import StackTier
from models.host_keys import fingerprint, lookup_name
from models.loader import parse_stack_config
from scripts.fleet_stack import fleet_files, fleet_values, hashed_name
from scripts.host_keys import host_seed, openssh_public_key
from tests.support.pulumi_mocks import COMMAND_TYPE, run_program, unsecret


def keygen(directory: Path, key_type: str, name: str) -> str:
    """A fresh key of `key_type` made by ssh-keygen: `TYPE BASE64`."""
    path = directory / name
    bits = ["-b", "2048"] if key_type == "rsa" else []
    subprocess.run(["ssh-keygen", "-q", "-t", key_type, *bits, "-N", "", "-f", str(path)], check=True)
    return " ".join(path.with_suffix(".pub").read_text().split()[:2])


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("keys")
    made = {f"ed{i}": keygen(directory, "ed25519", f"ed{i}") for i in range(6)}
    made["ecdsa"] = keygen(directory, "ecdsa", "ecdsa")
    made["rsa"] = keygen(directory, "rsa", "rsa")
    return made


# The names the tests look up, as `ssh` would for each address and port.
NAMES = [
    lookup_name(address, port)
    for address, port in itertools.product(
        ["10.0.0.1", "10.0.0.2", "10.0.0.7", "10.0.0.17", "host3.example", "HOST3.Example", "::1", "fd00::5"],
        [22, 2222],
    )
]


def sample(keys: dict[str, str]) -> str:
    """Every way a line names hosts: plain, a list, ports, patterns, negations, IPv6, several types."""
    return "\n".join(
        [
            "# a comment, then a blank line",
            "",
            f"10.0.0.1 {keys['ed0']}",
            f"10.0.0.1 {keys['ecdsa']}",
            f"10.0.0.1 {keys['rsa']} a comment",
            f"[10.0.0.2]:2222 {keys['ed1']}",
            f"10.0.0.3,host3.example {keys['ed2']}",
            f"10.0.0.* {keys['ed3']}",
            f"!10.0.0.7,10.0.0.? {keys['ed4']}",
            f"[10.0.0.1?]:2222 {keys['ed5']}",
            f"::1 {keys['ed1']}",
            f"[fd00::5]:2222 {keys['ed2']}",
            f"   {hashed_name('10.0.0.17')} {keys['ed5']}",
            f"{hashed_name('[10.0.0.2]:2222')} {keys['ecdsa']}",
            "",
        ]
    )


def openssh_lines(path: Path, name: str) -> list[int]:
    """The line numbers `ssh-keygen -F` finds for `name` (OpenSSH's own lookup)."""
    out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(path)], capture_output=True, text=True).stdout
    return [int(n) for n in re.findall(r"^# Host \S+ found: line (\d+)", out, re.M)]


@pytest.mark.parametrize("hashed", [False, True], ids=["plain", "hashed-by-ssh-keygen"])
def test_the_lines_that_name_each_host_are_openssh_s(tmp_path: Path, keys: dict[str, str], hashed: bool) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(sample(keys))
    if hashed:
        # OpenSSH's own hashing (HashKnownHosts): every plain name hashed, each with its own salt; the
        # patterns stay as they are.
        subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True)
        assert path.read_text().count("|1|") > 4
    known = kh.read(path)
    # `ssh` looks names up lowercased (ssh-keygen -F does not lowercase before it hashes).
    names = [name for name in NAMES if name == name.lower()]
    found = known.keys_for(names)
    for name in names:
        assert [line.number for line in found[name]] == openssh_lines(path, name), name
    assert {line.number for line in found["10.0.0.1"]} >= {3, 4, 5}


def test_each_key_line_is_one_openssh_reads(tmp_path: Path, keys: dict[str, str]) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(sample(keys))
    known = kh.read(path)
    assert [line.fingerprint for line in known.lines] == kh.openssh_fingerprints(path)
    # A key OpenSSH cannot read, though its type string is right (an ed25519 key of 31 bytes): named.
    short = base64.b64encode(b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x1f" + b"k" * 31).decode()
    path.write_text(sample(keys) + f"10.0.0.9 ssh-ed25519 {short}\n")
    with pytest.raises(
        kh.KnownHostsError, match=rf"{re.escape(str(path))}:15: OpenSSH cannot read this ssh-ed25519 key"
    ):
        kh.read(path)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("@cert-authority *.example {ed0}", r":4: @cert-authority lines are refused: a certificate authority's key"),
        ("@revoked 10.0.0.9 {ed0}", r":4: @revoked lines are refused: a revoked key"),
        ("10.0.0.9 ssh-ed25519 AAAAnot-base64", r":4: the key is no base64 key, not ssh-ed25519"),
        ("10.0.0.9 ssh-rsa {ed0_blob}", r":4: the key is a ssh-ed25519 key, not ssh-rsa"),
        ("10.0.0.9", r":4: not a `HOSTS TYPE KEY` line"),
        ("|1|abc|def {ed0}", r":4: a hashed name must be \|1\|SALT\|HASH"),
    ],
)
def test_a_line_that_cannot_be_honoured_is_refused_with_its_place(
    tmp_path: Path, keys: dict[str, str], line: str, expected: str
) -> None:
    path = tmp_path / "known_hosts.fleet"
    text = line.format(ed0=keys["ed0"], ed0_blob=keys["ed0"].split()[1])
    path.write_text(f"# keys\n10.0.0.1 {keys['ed1']}\n\n{text}\n")
    with pytest.raises(kh.KnownHostsError, match=re.escape(str(path)) + expected):
        kh.read(path)


def test_the_steps_pin_ed25519_then_ecdsa_then_rsa(tmp_path: Path, keys: dict[str, str]) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(
        f"10.0.0.1 {keys['rsa']}\n10.0.0.1 {keys['ecdsa']}\n10.0.0.1 {keys['ed0']}\n"
        f"10.0.0.2 {keys['rsa']}\n10.0.0.2 {keys['ecdsa']}\n10.0.0.3 {keys['rsa']}\n"
        f"10.0.0.4 {keys['ed1']}\n10.0.0.4 {keys['ed2']}\n10.0.0.5 {keys['ed3']}\n10.0.0.5* {keys['ed3']}\n"
    )
    found = kh.read(path).keys_for(["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"])
    assert [kh.pin(found[n]).key for n in ("10.0.0.1", "10.0.0.2", "10.0.0.3")] == [  # type: ignore[union-attr]
        keys["ed0"],
        keys["ecdsa"],
        keys["rsa"],
    ]
    # The same key twice (its own line and a pattern's) is one key; two different ones of a type are refused.
    assert kh.pin(found["10.0.0.5"]).key == keys["ed3"]  # type: ignore[union-attr]
    with pytest.raises(kh.KnownHostsError, match="lines 7, 8 give different ssh-ed25519 keys"):
        kh.pin(found["10.0.0.4"])


def fleet(hosts: int, tmp_path: Path, tier: StackTier = StackTier.PRODUCTION) -> tuple[Any, Path]:
    """A fleet's validated config and its known_hosts file (scripts/fleet_stack.py) in `tmp_path`."""
    files = fleet_files(hosts, "fleet")
    (tmp_path / "known_hosts.fleet").write_text(files["known_hosts.fleet"])
    values = fleet_values(hosts, known_hosts_file="known_hosts.fleet")
    values["tier"] = tier.value
    return parse_stack_config(values), tmp_path / "known_hosts.fleet"


def test_each_host_gets_its_own_key_from_the_file_and_its_own_hostkey_wins(
    tmp_path: Path, keys: dict[str, str]
) -> None:
    config, path = fleet(4, tmp_path)
    own = config.hosts[2].model_copy(update={"host_key": keys["ecdsa"]})
    config = config.model_copy(update={"hosts": (*config.hosts[:2], own, config.hosts[3])})
    resolved, host_keys, notes = kh.resolve(config, tmp_path)
    assert notes == []
    for host in resolved.hosts:
        expected = keys["ecdsa"] if host.name == "gpu-03" else openssh_public_key(host_seed(host.name))
        assert host.host_key == expected
        assert host_keys.pins[host.name].key == expected
    assert host_keys.survey_file(resolved.hosts[0]) == path
    # The host's own key: its survey checks that key alone, not the file.
    assert host_keys.survey_file(resolved.hosts[2]) is None
    assert len({h.host_key for h in resolved.hosts}) == 4


def test_a_production_host_missing_from_the_file_is_refused_naming_it(tmp_path: Path) -> None:
    config, path = fleet(3, tmp_path)
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines() if "10.40.0.12 " not in line))
    with pytest.raises(kh.KnownHostsError) as refused:
        kh.resolve(config, tmp_path)
    message = str(refused.value)
    assert message.startswith("vllm-fleet:hosts[gpu-02].hostKey: host 'gpu-02' has no SSH host key")
    assert "hosts[gpu-02].hostKey is not set and vllm-fleet:knownHostsFile (known_hosts.fleet) has no line" in message
    assert "ssh-keyscan -t ed25519 -p 22 10.40.0.12 >> known_hosts.fleet" in message
    assert "gpu-01" not in message and "gpu-03" not in message
    # A development host may go without: it accepts any key, and the preview says so.
    config = config.model_copy(update={"tier": StackTier.DEVELOPMENT})
    resolved, host_keys, notes = kh.resolve(config, tmp_path)
    assert "gpu-02" not in host_keys.pins and resolved.hosts[1].host_key is None
    assert notes == [
        "host 'gpu-02': known_hosts.fleet has no line for 10.40.0.12; its steps and survey accept any host key (a "
        "development stack). To pin it: run `ssh-keygen -R '10.40.0.12' -f known_hosts.fleet` (it removes the "
        "host's old lines), then `ssh-keyscan -t ed25519 -p 22 10.40.0.12 >> known_hosts.fleet`: the new line "
        "checked against the server's own /etc/ssh/ssh_host_ed25519_key.pub, and reviewed like the stack file"
    ]


def test_a_missing_file_is_refused_with_the_key_and_the_fix(tmp_path: Path) -> None:
    config, path = fleet(2, tmp_path)
    path.unlink()
    with pytest.raises(kh.KnownHostsError, match=r"vllm-fleet:knownHostsFile: cannot read .*known_hosts.fleet"):
        kh.resolve(config, tmp_path)


def test_an_rsa_pin_is_warned_about(tmp_path: Path, keys: dict[str, str]) -> None:
    config, path = fleet(2, tmp_path)
    path.write_text(f"10.40.0.11 {keys['rsa']}\n10.40.0.12 {keys['ed0']}\n")
    _, host_keys, notes = kh.resolve(config, tmp_path)
    assert host_keys.pins["gpu-01"].key_type == "ssh-rsa"
    assert len(notes) == 1 and notes[0].startswith("host 'gpu-01': its steps pin its RSA key")
    assert "no common algorithm for host key" in notes[0] and "ssh-keyscan -t ed25519 -p 22 10.40.0.11" in notes[0]


# What OpenSSH 9.2 printed (LogLevel=ERROR) for a sandbox host whose key was not the file's.
CHANGED_STDERR = """\
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @
@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@
IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!
Someone could be eavesdropping on you right now (man-in-the-middle attack)!
It is also possible that a host key has just been changed.
The fingerprint for the ED25519 key sent by the remote host is
SHA256:9q5Yg8b588SFKjS+RPnghjGi1rEG3/Tx1upxviiysYk.
Please contact your system administrator.
Add correct host key in /work/known_hosts.fleet to get rid of this message.
Offending ED25519 key in /work/known_hosts.fleet:1
  remove with:
  ssh-keygen -f "/work/known_hosts.fleet" -R "[127.0.0.1]:2236"
Host key for [127.0.0.1]:2236 has changed and you have requested strict checking.
Host key verification failed.
"""


def test_a_changed_key_is_refused_naming_the_host_and_the_fix(tmp_path: Path) -> None:
    config, _ = fleet(1, tmp_path)
    host = config.hosts[0].model_copy(update={"address": "127.0.0.1", "port": 2236})
    message = kh.key_refusal(host, CHANGED_STDERR, Path("/work/known_hosts.fleet"))
    assert message is not None
    assert message.startswith("host 'gpu-01' (root@127.0.0.1:2236): its SSH host key changed: it showed the ED25519 ")
    assert "SHA256:9q5Yg8b588SFKjS+RPnghjGi1rEG3/Tx1upxviiysYk, which /work/known_hosts.fleet does not list" in message
    assert "`ssh-keygen -R '[127.0.0.1]:2236' -f /work/known_hosts.fleet`" in message
    assert "`ssh-keyscan -t ed25519 -p 2236 127.0.0.1 >> /work/known_hosts.fleet`" in message
    assert kh.key_refusal(host, "Permission denied (publickey).", None) is None


def test_the_preview_says_host_key_changed_when_the_pin_differs_from_the_hosts_record(tmp_path: Path) -> None:
    config, _ = fleet(2, tmp_path)
    resolved, host_keys, _ = kh.resolve(config, tmp_path)
    first = resolved.hosts[0]
    now = host_keys.pins[first.name].fingerprint
    assert now == fingerprint(openssh_public_key(host_seed("gpu-01")))
    # The record as the survey reports it (host/survey.py's hostKeys), parsed once into the Survey.
    recorded = Survey.from_dict({"hostKeys": {"fleet": now, "other": "none"}})
    assert recorded.host_keys == {"fleet": now, "other": "none"}
    assert kh.changed_note("fleet", first, host_keys, recorded) is None
    assert kh.changed_note("fleet", first, host_keys, Survey()) is None  # never pinned here: no record
    note = kh.changed_note("fleet", first, host_keys, Survey(host_keys={"fleet": "SHA256:old"}))
    assert note is not None and note.startswith("host 'gpu-01': host key changed: its steps pinned SHA256:old")
    assert f"now pin {now} (ssh-ed25519, from line 2 of {tmp_path / 'known_hosts.fleet'})" in note


def test_the_program_pins_each_hosts_key_from_the_file(tmp_path: Path) -> None:
    """Under mocks, the real program: every step of each host connects with that host's own key from the
    file, and its preflight records that key's fingerprint."""
    files = fleet_files(3, "fleet3")
    (tmp_path / "known_hosts.fleet3").write_text(files["known_hosts.fleet3"])
    values = fleet_values(3, known_hosts_file=str(tmp_path / "known_hosts.fleet3"))
    resources = run_program("fleet3", values)
    for host in ("gpu-01", "gpu-02", "gpu-03"):
        key = openssh_public_key(host_seed(host))
        steps = [r for r in resources.values() if r.type == COMMAND_TYPE and r.name.startswith(f"{host}-")]
        assert len(steps) > 3
        for step in steps:
            assert unsecret(step.inputs["connection"])[0]["hostKey"] == key, step.name
        assert f"PINNED_HOST_KEY=SHA256:{fingerprint(key).removeprefix('SHA256:')}" in str(
            resources[f"{host}-preflight"].inputs["create"]
        )
