"""Whether each host answers on its SSH port, asked while the program runs (in previews too), before any
step is declared: an unreachable host fails fast with its name instead of a step hanging in dial retries."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from models.hosts import Host

# VLLM_FLEET_OFFLINE=1: the run contacts no host (previews of stacks this machine must not reach).
OFFLINE_ENV = "VLLM_FLEET_OFFLINE"


def offline(env: Mapping[str, str]) -> bool:
    return env.get(OFFLINE_ENV) == "1"


class HostUnreachable(Exception):
    pass


# The probe's SSH identification string (RFC 4253 4.2), sent after the server's banner.
PROBE_IDENTIFICATION = b"SSH-2.0-vllm-fleet-probe\r\n"


def probe_ssh(host: Host, timeout: float = 5.0) -> str:
    """Open a TCP connection to the host's SSH port and read its banner (no login, no session); the banner,
    or HostUnreachable naming the host and the fix.

    Runs while the program is evaluated, in `pulumi preview` too, so an unreachable host fails the
    preview within `timeout` seconds with its name, instead of a step hanging in dial retries later.
    """
    try:
        with socket.create_connection((host.address, host.port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256).decode(errors="replace").strip()
            if banner.startswith("SSH-"):
                # Say who we are before leaving, as a client does first: sshd then logs the close at INFO
                # ("Connection closed by ... [preauth]"). A probe that only read the banner was logged as
                # "error: kex_exchange_identification: Connection closed by remote host" on every
                # program run, in every server's auth log. The host may have closed already: no matter.
                with contextlib.suppress(OSError):
                    sock.sendall(PROBE_IDENTIFICATION)
    except OSError as error:
        raise HostUnreachable(
            f"host {host.name!r} ({host.user}@{host.address}:{host.port}, vllm-fleet:hosts) is unreachable: "
            f"{error.__class__.__name__}: {error or 'timed out'} after at most {timeout:g} s. Check that it is up "
            "and that the address and port are right."
        ) from None
    if not banner.startswith("SSH-"):
        raise HostUnreachable(
            f"host {host.name!r} ({host.address}:{host.port}) answered, but not as an SSH server: {banner[:60]!r}"
        )
    return banner


# Hosts probed at once: each probe is one socket waiting on the network, so a fleet's probes take about
# as long as its slowest host's, not the sum of them.
PROBE_WORKERS = 64


def probe_all(hosts: Sequence[Host], timeout: float = 5.0) -> None:
    """Probe every host at once; one HostUnreachable naming each host that failed, in config order."""

    def one(host: Host) -> str | None:
        try:
            probe_ssh(host, timeout)
        except HostUnreachable as error:
            return str(error)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_WORKERS, len(hosts)))) as pool:
        failures = [message for message in pool.map(one, hosts) if message is not None]
    if failures:
        raise HostUnreachable("\n".join(failures))
