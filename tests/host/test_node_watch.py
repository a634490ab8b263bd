"""node-watch: the headless engine of a multi-node deployment ends when the head it joined goes away,
checked with real processes and real TCP connections on loopback."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from host import node_watch

ROOT = Path(__file__).resolve().parent.parent.parent
# A line of /proc/net/tcp: 10.99.0.2:34931 -> 10.99.0.1:41278, established, inode 4242.
TCP = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    "   0: 0200630A:8853 0100630A:A17E 01 00000000:00000000 00:00000000 00000000     0        0 4242 1\n"
    "   1: 0200630A:8854 0100630A:A17F 08 00000000:00000000 00:00000000 00000000     0        0 4243 1\n"
)
# /proc/net/tcp6: [::ffff:10.99.0.2]:53516 -> [::ffff:10.99.0.1]:29501, established, inode 77.
TCP6 = (
    "  sl  local_address                         remote_address                        st\n"
    "   0: 0000000000000000FFFF00000200630A:D10C 0000000000000000FFFF00000100630A:733D 01 "
    "00000000:00000000 00:00000000 00000000     0        0 77 1\n"
)


def test_reads_established_connections_to_the_head_from_proc_tables() -> None:
    assert node_watch.established_to("10.99.0.1", [TCP, TCP6]) == {"4242", "77"}
    assert node_watch.established_to("10.99.0.3", [TCP, TCP6]) == set()


def test_stops_only_after_the_engine_joined_and_then_lost_the_head() -> None:
    watch = node_watch.Watch(grace=10)
    assert not watch.observe(False, 0) and not watch.observe(False, 100)  # waiting for a head: fine
    assert not watch.observe(True, 101)
    assert not watch.observe(False, 102) and not watch.observe(False, 111)
    assert not watch.observe(True, 112)  # back within the grace: nothing happened
    assert not watch.observe(False, 113)
    assert watch.observe(False, 123)


def node_watch_command(engine: str, *options: str) -> list[str]:
    """node-watch run as the host runs it, with `options`, watching a Python engine that runs `engine`."""
    return [sys.executable, str(ROOT / "host" / "node_watch.py"), *options, "--", sys.executable, "-c", engine]


def test_a_real_engine_stand_in_is_stopped_when_its_head_closes_the_connection() -> None:
    head = socket.create_server(("127.0.0.1", 0))
    port = head.getsockname()[1]
    # The "engine": connects to the head and then ignores SIGTERM, as a stuck headless engine does.
    engine = (
        "import signal, socket, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"s = socket.create_connection(('127.0.0.1', {port})); time.sleep(600)"
    )
    watcher = subprocess.Popen(
        node_watch_command(engine, "--head", "127.0.0.1", "--grace", "1", "--poll", "0.2"),
        stdout=subprocess.PIPE,
        text=True,
    )
    connection, _ = head.accept()
    time.sleep(1.0)
    assert watcher.poll() is None, "a connected engine keeps running"
    started = time.monotonic()
    connection.close()  # the head goes away
    head.close()
    out, _ = watcher.communicate(timeout=30)
    assert watcher.returncode == 1, out
    assert "lost the head at 127.0.0.1" in out
    # grace 1 s, then SIGTERM ignored for 10 s, then SIGKILL
    assert time.monotonic() - started < 20


def test_an_engine_that_exits_ends_the_watch_with_its_status() -> None:
    result = subprocess.run(
        node_watch_command("raise SystemExit(3)", "--head", "10.0.0.1", "--poll", "0.1"),
        timeout=30,
        check=False,
    )
    assert result.returncode == 3
