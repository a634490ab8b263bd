"""The paper fleet's host keys (scripts/host_keys.py) are real ed25519 keys: the public half of a key that
`ssh-keygen` made, derived here from that key's own seed, is the one ssh-keygen wrote; and each host of a
fleet gets a key of its own, the same on every run."""

from __future__ import annotations

import base64
import struct
import subprocess
from pathlib import Path

from scripts.host_keys import host_seed, openssh_public_key


def _strings(data: bytes, offset: int, count: int) -> tuple[list[bytes], int]:
    found = []
    for _ in range(count):
        (length,) = struct.unpack(">I", data[offset : offset + 4])
        found.append(data[offset + 4 : offset + 4 + length])
        offset += 4 + length
    return found, offset


def openssh_seed(private_key: Path) -> bytes:
    """The 32-byte seed of an unencrypted OpenSSH ed25519 private key (PROTOCOL.key's openssh-key-v1)."""
    body = "".join(line for line in private_key.read_text().splitlines() if not line.startswith("-----"))
    data = base64.b64decode(body)
    magic = b"openssh-key-v1\0"
    assert data.startswith(magic)
    (cipher, _kdf, _options), offset = _strings(data, len(magic), 3)
    assert cipher == b"none"
    offset += 4  # the number of keys: one
    (_public, private), _ = _strings(data, offset, 2)
    # check ints (8 bytes), then the key type, the public key and the 64-byte secret (seed + public key)
    (_type, _pub, secret), _ = _strings(private, 8, 3)
    return secret[:32]


def test_the_derived_public_key_is_the_one_ssh_keygen_wrote(tmp_path: Path) -> None:
    for i in range(4):
        key = tmp_path / f"key{i}"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        written = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        assert openssh_public_key(openssh_seed(key)) == written


def test_each_host_gets_its_own_key_the_same_on_every_run(tmp_path: Path) -> None:
    keys = [openssh_public_key(host_seed(f"gpu-{i:04d}")) for i in range(64)]
    assert len(set(keys)) == 64
    assert keys[7] == openssh_public_key(host_seed("gpu-0007"))
    # OpenSSH reads every one of them as an ed25519 key.
    path = tmp_path / "known_hosts"
    path.write_text("".join(f"10.0.0.{i} {key}\n" for i, key in enumerate(keys)))
    listed = subprocess.run(["ssh-keygen", "-lf", str(path)], capture_output=True, text=True, check=True).stdout
    assert listed.count("(ED25519)") == 64
