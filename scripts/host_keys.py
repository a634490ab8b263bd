"""Real ed25519 host keys for fleets that exist only on paper (the bench's, the tests'): each host's public
key derived from a seed that its name decides, so the same fleet gets the same keys on every machine and
no key is written anywhere but the known_hosts file.

The derivation is RFC 8032's (section 5.1.5): the seed's SHA-512, clamped, times the curve's base point,
encoded as 32 bytes. No package of this project's brings ed25519 (pulumi and pydantic need none), and
`ssh-keygen` takes no seed; a fixed-base table makes a key ~128 point additions in Python (~1 ms), so 1,024
keys take about a second. tests/test_host_keys.py holds it to OpenSSH: the public half of a key that
`ssh-keygen` made, derived here from that key's seed, is the one ssh-keygen wrote.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from functools import cache

# The field, the curve's constant d and its base point (RFC 8032 section 5.1).
P = 2**255 - 19
D = -121665 * pow(121666, P - 2, P) % P
BASE_Y = 4 * pow(5, P - 2, P) % P
KEY_TYPE = "ssh-ed25519"

Point = tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, x*y = T/Z


def _recover_x(y: int, sign: int) -> int:
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * pow(2, (P - 1) // 4, P) % P
    return P - x if x & 1 != sign else x


def _add(a: Point, b: Point) -> Point:
    """a + b on the twisted Edwards curve (RFC 8032 section 5.1.4)."""
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % P
    bb = (y1 + x1) * (y2 + x2) % P
    cc = 2 * t1 * t2 * D % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return e * f % P, g * h % P, f * g % P, e * h % P


@cache
def _base_powers() -> tuple[Point, ...]:
    """2^i times the base point, i = 0..254: a scalar times the base point is then only additions."""
    x = _recover_x(BASE_Y, 0)
    point: Point = (x, BASE_Y, 1, x * BASE_Y % P)
    powers = [point]
    for _ in range(254):
        point = _add(point, point)
        powers.append(point)
    return tuple(powers)


def public_key(seed: bytes) -> bytes:
    """The 32-byte ed25519 public key of a 32-byte private seed."""
    if len(seed) != 32:
        raise ValueError("an ed25519 seed is 32 bytes")
    digest = bytearray(hashlib.sha512(seed).digest()[:32])
    digest[0] &= 248
    digest[31] &= 127
    digest[31] |= 64
    scalar = int.from_bytes(digest, "little")
    total: Point = (0, 1, 1, 0)
    for i, power in enumerate(_base_powers()):
        if scalar >> i & 1:
            total = _add(total, power)
    x, y, z, _ = total
    inverse = pow(z, P - 2, P)
    x, y = x * inverse % P, y * inverse % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def openssh_public_key(seed: bytes) -> str:
    """`ssh-ed25519 AAAA...`, as `ssh-keyscan -t ed25519` prints a server's key of this seed."""
    blob = _ssh_string(KEY_TYPE.encode()) + _ssh_string(public_key(seed))
    return f"{KEY_TYPE} {base64.b64encode(blob).decode()}"


def host_seed(name: str, salt: str = "vllm-fleet paper fleet") -> bytes:
    """The seed of a host of a paper fleet: its name's, so each host has a key of its own."""
    return hashlib.sha256(f"{salt}\0{name}".encode()).digest()
