#!/usr/bin/env python3
"""vllm-fleet node-watch: run a headless vLLM engine of a multi-node deployment, and end it when the head
it joined goes away.

vLLM's headless engine (`vllm serve --headless`, vLLM's own multi-node mode) does not notice that the head
it joined has died: it waits forever without a word, and a new head cannot form a group with it (seen on
the CPU build 0.32: the new head blocks at start-up). So a head that restarts (a crash, a swap, a
rollback) would find its nodes stuck. This program is the unit's main process: it starts the engine as
its child and watches the engine's TCP connections to the head's address (from /proc, no tools needed).
Once the engine has been connected and then holds no connection to the head for --grace seconds, it
stops the engine (SIGTERM, then SIGKILL: a stuck engine ignores SIGTERM) and exits 1, so systemd's
Restart=always starts a fresh engine that waits for the next head. When the engine exits by itself,
this program exits with its status.

Which engine it starts: with --launches DIR, the launch of the model the head runs now. A node keeps one
launch per model the head may serve (host/tools/node.py installs them; `<master port>.json`), and the head's
rendezvous port is per model, so the launch to run is the one whose master port the head listens on. A
node therefore follows its head: through a swap (the head stops the old model, its nodes lose it and
restart, and join the new one), through the head's rollback (the new head never listens, or goes away
before the node joined it: the node starts the old launch again), and after a reboot. It never runs a
launch the head has left. Without --launches, it runs the COMMAND after `--` (units from before).

Usage: node-watch --head ADDRESS [--grace SECONDS] [--poll SECONDS] (--launches DIR | -- COMMAND [ARGS...])
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn

from host.contract import NODE_CURRENT, NodeLaunch
from host.facts import children_by_parent
from host.model_files import verified_unchanged
from host.processes import stop_group

ESTABLISHED = "01"  # the state column of /proc/net/tcp{,6}
# Seconds from the SIGTERM of the node's launch to its SIGKILL.
STOP_WAIT = 10.0


def _address(hex_address: str) -> str:
    """An address as /proc/net/tcp{,6} prints it (host byte order in 32-bit words) in its usual form."""
    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(words)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def established_to(head: str, tables: Iterable[str]) -> set[str]:
    """Socket inodes of established TCP connections whose remote address is `head`, from the text of
    /proc/net/tcp and /proc/net/tcp6."""
    inodes: set[str] = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != ESTABLISHED:
                continue
            remote = fields[2].rsplit(":", 1)[0]
            if _address(remote) == head:
                inodes.add(fields[9])
    return inodes


def process_tree(root: int, proc: Path = Path("/proc")) -> set[int]:
    """`root` and all its descendants."""
    children = children_by_parent(proc)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(children.get(pid, []))
    return tree


def socket_inodes(pids: Iterable[int], proc: Path = Path("/proc")) -> set[str]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            fds = list((proc / str(pid) / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    return inodes


def connected_to_head(root: int, head: str, proc: Path = Path("/proc")) -> bool:
    tables = []
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            tables.append((proc / "net" / name).read_text())
    return bool(established_to(head, tables) & socket_inodes(process_tree(root, proc), proc))


class Watch:
    """The decision, apart from the processes: fed one observation per poll, it says when to stop."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.joined = False
        self.lost_since: float | None = None

    def observe(self, connected: bool, now: float) -> bool:
        """True once the engine, having joined the head, has had no connection to it for `grace` s."""
        if connected:
            self.joined, self.lost_since = True, None
            return False
        if not self.joined:
            return False  # still waiting for a head: that is what a fresh engine does
        if self.lost_since is None:
            self.lost_since = now
        return now - self.lost_since >= self.grace


def listens(address: str, port: int, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at address:port (the head's rendezvous store, here)."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def read_launches(directory: Path) -> list[NodeLaunch]:
    """The node's launches, newest first (a launch that cannot be read is skipped and said)."""
    found: list[tuple[float, NodeLaunch]] = []
    for path in directory.glob("*.json"):
        try:
            found.append((path.stat().st_mtime, NodeLaunch.load(path)))
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"node-watch: skipping {path}: {error}", flush=True)
    return [launch for _, launch in sorted(found, key=lambda item: -item[0])]


def head_runs(launches: Sequence[NodeLaunch], head_listens: Callable[[int], bool]) -> NodeLaunch | None:
    """The launch whose master port the head listens on: the model it runs now (None: no head yet)."""
    return next((launch for launch in launches if head_listens(launch.master_port)), None)


def model_files_unchanged(directory: str) -> bool:
    """model-sync's check of the launch's model files against their verified manifest (the unit's own
    ExecStartPre cannot: which model runs is chosen here)."""
    unchanged, message = verified_unchanged(Path(directory))
    print(f"model-sync: {message}", file=sys.stdout if unchanged else sys.stderr, flush=True)
    return unchanged


def run_launches(head: str, directory: Path, grace: float, poll: float, stop_signals: StopSignals) -> int:
    """Wait for the head to run one of the node's launches, run that one, and end it (exit 1, for systemd
    to start a fresh watch) once it lost the head or, before it joined, the head went on to another."""
    said = ""
    while True:
        launches = read_launches(directory)
        chosen = head_runs(launches, lambda port: listens(head, port))
        if chosen is not None:
            break
        waiting = ", ".join(f"{launch.model} (port {launch.master_port})" for launch in launches) or "none installed"
        if waiting != said:
            print(
                f"node-watch: waiting for the head at {head} to start one of this node's launches: {waiting}",
                flush=True,
            )
            said = waiting
        time.sleep(poll)
    if chosen.model_dir and not model_files_unchanged(chosen.model_dir):
        return 1
    (directory / NODE_CURRENT).write_text(f"{chosen.master_port}\n", encoding="utf-8")
    print(
        f"node-watch: the head at {head} runs {chosen.model} (master port {chosen.master_port}); starting its engine",
        flush=True,
    )
    child = stop_signals.start(list(chosen.argv), env={**os.environ, **chosen.environment})

    def head_moved(joined: bool, connected: bool) -> str | None:
        if connected or listens(head, chosen.master_port):
            return None
        if joined:
            # No grace needed: the head's rendezvous port is closed too, so that head is gone.
            return f"the engine lost the head at {head}, which listens no more"
        other = head_runs(read_launches(directory), lambda port: listens(head, port))
        if other is not None and other.master_port != chosen.master_port:
            return f"the head at {head} now runs {other.model}, not {chosen.model}; switching"
        return None

    return supervise(child, head, grace, poll, head_moved)


def supervise(
    child: subprocess.Popen[bytes],
    head: str,
    grace: float,
    poll: float,
    head_moved: Callable[[bool, bool], str | None] = lambda joined, connected: None,
) -> int:
    """Watch the engine until it exits (its status) or must stop (1, for systemd to start a fresh watch):
    it lost the head it joined for `grace` s, or `head_moved(joined, connected)` says why it must go."""
    watch = Watch(grace)
    while child.poll() is None:
        time.sleep(poll)
        connected = connected_to_head(child.pid, head)
        if watch.observe(connected, time.monotonic()):
            reason: str | None = f"the engine lost the head at {head} {grace:g} s ago"
        else:
            reason = head_moved(watch.joined, connected)
        if reason is not None:
            print(f"node-watch: {reason}; stopping it so that systemd starts a fresh watch", flush=True)
            stop_group(child, STOP_WAIT)
            return 1
    return child.returncode


class StopSignals:
    """systemd's stop (SIGTERM; SIGINT by hand) ends the engine's whole process group too, whenever it
    comes. Installed before the engine starts: the engine runs in a session of its own, so a stop that
    killed the watch while it was starting the engine would leave the engine running, unwatched (seen:
    an engine outlived its watch). Such a stop is held until the engine is known, then carried out."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.starting = False
        self.received: int | None = None
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.on_signal)

    def on_signal(self, signum: int, _frame: object) -> None:
        self.received = signum
        if self.child is not None or not self.starting:
            self.stop_and_exit()
        # else: the engine is being started; start() carries the stop out once it knows the engine

    def start(self, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start the engine in its own process group (so a stop reaches its workers too)."""
        self.starting = True
        child = subprocess.Popen(argv, env=env, start_new_session=True)
        self.child = child
        if self.received is not None:
            self.stop_and_exit()
        return child

    def stop_and_exit(self) -> NoReturn:
        if self.child is not None:
            stop_group(self.child, STOP_WAIT)
        sys.exit(128 + (self.received or signal.SIGTERM))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", required=True, help="the head's cluster address (the master address)")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds without the head before stopping")
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--launches", type=Path, help="the node's launches: run the one the head runs")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    head = str(ipaddress.ip_address(args.head))
    if args.launches is not None and command:
        parser.error("give either --launches or the engine's command after --")
    if args.launches is None and not command:
        parser.error("give --launches, or the engine's command after --")
    stop_signals = StopSignals()
    if args.launches is not None:
        return run_launches(head, args.launches, args.grace, args.poll, stop_signals)
    return supervise(stop_signals.start(command), head, args.grace, args.poll)


if __name__ == "__main__":
    sys.exit(main())
