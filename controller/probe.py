"""Whether each host answers on its SSH port, asked while the program runs (in previews too), before any
step is declared: an unreachable host fails fast with its name instead of a step hanging in dial retries."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING

# Only a module of a few lines at run time: start_early runs before the program imports its models.
from models.ssh_address import DEFAULT_SSH_PORT, check_address, is_port

if TYPE_CHECKING:
    from models.hosts import Host

# VLLM_FLEET_OFFLINE=1: the run contacts no host (previews of stacks this machine must not reach).
OFFLINE_ENV = "VLLM_FLEET_OFFLINE"


def offline(env: Mapping[str, str]) -> bool:
    return env.get(OFFLINE_ENV) == "1"


class HostUnreachable(Exception):
    pass


# The probe's SSH identification string (RFC 4253 4.2), sent after the server's banner.
PROBE_IDENTIFICATION = b"SSH-2.0-vllm-fleet-probe\r\n"


def read_banner(address: str, port: int, timeout: float) -> str:
    """Open a TCP connection to an SSH port and read the server's banner (no login, no session);
    OSError when nothing answers within `timeout` seconds."""
    with socket.create_connection((address, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        banner = sock.recv(256).decode(errors="replace").strip()
        if banner.startswith("SSH-"):
            # Say who we are before leaving, as a client does first: sshd then logs the close at INFO
            # ("Connection closed by ... [preauth]"). A probe that only read the banner was logged as
            # "error: kex_exchange_identification: Connection closed by remote host" on every
            # program run, in every server's auth log. The host may have closed already: no matter.
            with contextlib.suppress(OSError):
                sock.sendall(PROBE_IDENTIFICATION)
    return banner


def judge(host: Host, banner: Callable[[], str], timeout: float) -> str:
    """The banner `banner()` reads for this host, or HostUnreachable naming the host and the fix."""
    try:
        text = banner()
    except OSError as error:
        raise HostUnreachable(
            f"host {host.name!r} ({host.user}@{host.address}:{host.port}, vllm-fleet:hosts) is unreachable: "
            f"{error.__class__.__name__}: {error or 'timed out'} after at most {timeout:g} s. Check that it is up "
            "and that the address and port are right."
        ) from None
    if not text.startswith("SSH-"):
        raise HostUnreachable(
            f"host {host.name!r} ({host.address}:{host.port}) answered, but not as an SSH server: {text[:60]!r}"
        )
    return text


def probe_ssh(host: Host, timeout: float = 5.0) -> str:
    """The host's SSH banner, or HostUnreachable.

    Runs while the program is evaluated, in `pulumi preview` too, so an unreachable host fails the
    preview within `timeout` seconds with its name, instead of a step hanging in dial retries later.
    """
    return judge(host, lambda: read_banner(host.address, host.port, timeout), timeout)


# Hosts probed at once: each probe is one socket waiting on the network, so a fleet's probes take about
# as long as its slowest host's, not the sum of them.
PROBE_WORKERS = 64


Target = tuple[str, int]  # (address, port)


class EarlyProbes:
    """Probes started before the program has imported and validated its config (`start_early`), by the
    address and port they reach. A probe takes a round trip and sshd's start of a session (~15 ms on the
    sandbox, more across a network), which the program's imports (~100 ms) now cover; `probe_all` waits
    for the one of each host it would otherwise start itself."""

    def __init__(self, targets: Sequence[Target], timeout: float) -> None:
        self.timeout = timeout
        self.futures: dict[Target, Future[str]] = {target: Future() for target in targets}
        self.pending: SimpleQueue[tuple[Target, Future[str]]] = SimpleQueue()
        for item in self.futures.items():
            self.pending.put(item)
        # At most PROBE_WORKERS at once, as probe_all. Daemon threads, not an executor's: a program that
        # stops on a config error exits without waiting for them.
        for _ in range(min(PROBE_WORKERS, len(self.futures))):
            threading.Thread(target=self._work, name="early-ssh-probe", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                target, future = self.pending.get_nowait()
            except Empty:
                return
            try:
                future.set_result(read_banner(target[0], target[1], self.timeout))
            except BaseException as error:  # handed to whoever asks for this host
                future.set_exception(error)

    def banner(self, host: Host) -> Callable[[], str] | None:
        future = self.futures.get((host.address, host.port))
        return None if future is None else future.result


def early_targets(raw_hosts: object) -> list[Target]:
    """The address and port of each host of the raw `vllm-fleet:hosts` that the program will surely probe:
    written as the Host model accepts them as they stand (models/ssh_address.py, the same rules), and not
    cordoned (`cordon` absent or false). Anything less plain is left to the probe after validation, so the
    early probes reach only hosts that the validated config probes too (a config refused for another
    reason has had those hosts' SSH banners read, nothing more)."""
    if not isinstance(raw_hosts, list):
        return []
    targets: list[Target] = []
    for entry in raw_hosts:
        if not isinstance(entry, dict) or entry.get("cordon", False) is not False:
            continue
        address, port = entry.get("address"), entry.get("port", DEFAULT_SSH_PORT)
        if not isinstance(address, str) or not is_port(port):
            continue
        try:
            check_address(address)
        except ValueError:
            continue
        targets.append((address, port))
    return targets


def start_early(read_hosts: Callable[[], object], env: Mapping[str, str], timeout: float = 5.0) -> EarlyProbes:
    """Start probing the hosts of the raw config (`read_hosts()`) now, unless this run is offline. A config
    that cannot be read starts nothing: the program's validation reports it as before."""
    if offline(env):
        return EarlyProbes([], timeout)
    try:
        raw_hosts = read_hosts()
    except Exception:  # e.g. not JSON: program.load says what is wrong with it
        raw_hosts = None
    return EarlyProbes(early_targets(raw_hosts), timeout)


def probe_all(hosts: Sequence[Host], timeout: float = 5.0, early: EarlyProbes | None = None) -> None:
    """Probe every host at once (or wait for its early probe); one HostUnreachable naming each host that
    failed, in config order."""

    probes = early if early is not None else EarlyProbes([], timeout)

    def one(host: Host) -> str | None:
        waited = probes.banner(host)
        try:
            if waited is None:
                probe_ssh(host, timeout)
            else:
                judge(host, waited, probes.timeout)
        except HostUnreachable as error:
            return str(error)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(PROBE_WORKERS, len(hosts)))) as pool:
        failures = [message for message in pool.map(one, hosts) if message is not None]
    if failures:
        raise HostUnreachable("\n".join(failures))
