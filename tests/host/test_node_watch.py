"""node-watch: the headless engine of a multi-node deployment ends when the head it joined goes away,
checked with real processes and real TCP connections on loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host.contract import NodeLaunch
from host.tools import node_watch
from sandbox.processes import free_port

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
    """node-watch run from the host package, with `options`, watching a Python engine that runs `engine`."""
    return [sys.executable, "-m", "host.tools.node_watch", *options, "--", sys.executable, "-c", engine]


def test_a_real_engine_stand_in_is_stopped_when_its_head_closes_the_connection() -> None:
    head = socket.create_server(("127.0.0.1", 0))
    head.settimeout(30)
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
        cwd=ROOT,
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
        cwd=ROOT,
    )
    assert result.returncode == 3


# -- launches: the node runs the launch of the model its head runs ---------------------------------------


def write_launch(directory: Path, model: str, port: int, engine: str, mtime: float) -> None:
    launch = NodeLaunch(model, port, (sys.executable, "-c", engine), {"STAND_IN_MODEL": model}, "")
    path = directory / launch.file_name
    path.write_text(launch.to_json())
    os.utime(path, (mtime, mtime))


def test_the_launch_to_run_is_the_newest_one_whose_master_port_the_head_listens_on(tmp_path: Path) -> None:
    now = time.time()
    write_launch(tmp_path, "old", 29501, "", now - 60)
    write_launch(tmp_path, "new", 29502, "", now)
    (tmp_path / "29503.json").write_text("{not json")  # skipped, and said
    launches = node_watch.read_launches(tmp_path)
    assert [launch.model for launch in launches] == ["new", "old"]
    assert node_watch.head_runs(launches, lambda port: port == 29501).model == "old"  # type: ignore[union-attr]
    assert node_watch.head_runs(launches, lambda port: True).model == "new"  # type: ignore[union-attr]
    assert node_watch.head_runs(launches, lambda port: False) is None


class StandInHead:
    """A head's rendezvous port: accepts every connection (node-watch's probes, the engine joining) and
    holds them until it goes away."""

    def __init__(self, port: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", port))
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.connections.append(self.listener.accept()[0])

    def close(self) -> None:
        # shutdown wakes the thread's accept (close alone does not): a thread left accepting would take, once
        # the number of the closed socket is reused, the connections of the next test's server.
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=5)
        self.listener.close()
        for connection in self.connections:
            connection.close()


def watch_launches(directory: Path) -> subprocess.Popen[str]:
    options = ["--head", "127.0.0.1", "--grace", "1", "--poll", "0.2", "--launches", str(directory)]
    return subprocess.Popen(
        [sys.executable, "-m", "host.tools.node_watch", *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )


def test_a_node_follows_its_head_from_one_model_to_the_other(tmp_path: Path) -> None:
    """A real watch, real listeners as the head's rendezvous ports, engines that join the head they find:
    it waits while the head runs neither model, runs the one the head runs, and after losing that head
    the next watch runs the other model's launch, which the head now runs."""
    ports = {"a": free_port(), "b": free_port()}
    # The "engine": joins the head on its model's port and says which model it is.
    engine = (
        "import os, socket, time; m = os.environ['STAND_IN_MODEL']; print('engine', m, flush=True); "
        "s = socket.create_connection(('127.0.0.1', {port})); time.sleep(600)"
    )
    for model, port in ports.items():
        write_launch(tmp_path, model, port, engine.format(port=port), time.time())
    watcher = watch_launches(tmp_path)
    time.sleep(1.5)
    assert watcher.poll() is None, "no head yet: it waits"
    head = StandInHead(ports["a"])
    deadline = time.monotonic() + 30
    while not (tmp_path / "current").is_file():
        assert time.monotonic() < deadline, "the watch did not run model a's launch"
        time.sleep(0.1)
    assert (tmp_path / "current").read_text().strip() == str(ports["a"])
    time.sleep(1.0)
    assert watcher.poll() is None, "an engine joined to its head keeps running"
    head.close()  # the head stops model a
    out, _ = watcher.communicate(timeout=30)
    assert watcher.returncode == 1 and "engine a" in out and "lost the head" in out, out
    head = StandInHead(ports["b"])  # the head now runs model b
    watcher = watch_launches(tmp_path)
    try:
        deadline = time.monotonic() + 30
        while (tmp_path / "current").read_text().strip() != str(ports["b"]):
            assert time.monotonic() < deadline, "the next watch did not run model b's launch"
            time.sleep(0.1)
    finally:
        watcher.terminate()
        out, _ = watcher.communicate(timeout=30)
        head.close()
    assert "runs b (master port" in out, out


def test_a_node_waiting_for_a_head_that_went_back_to_the_old_model_switches_to_it(tmp_path: Path) -> None:
    """The head's rollback: the node started the new model's engine, which had not joined yet, and the head
    went back to the old model. The watch ends that engine (exit 1: systemd starts a fresh watch)."""
    ports = {"old": free_port(), "new": free_port()}
    never_joins = "import time; time.sleep(600)"
    write_launch(tmp_path, "old", ports["old"], never_joins, time.time() - 60)
    write_launch(tmp_path, "new", ports["new"], never_joins, time.time())
    new_head = StandInHead(ports["new"])
    watcher = watch_launches(tmp_path)
    deadline = time.monotonic() + 30
    while not (tmp_path / "current").is_file():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (tmp_path / "current").read_text().strip() == str(ports["new"])
    new_head.close()
    old_head = StandInHead(ports["old"])
    try:
        out, _ = watcher.communicate(timeout=30)
    finally:
        old_head.close()
    assert watcher.returncode == 1, out
    assert "now runs old, not new; switching" in out, out


@pytest.fixture
def stop_signals() -> Iterator[node_watch.StopSignals]:
    """node-watch's stop handlers, installed in this process for the test, pytest's own put back after."""
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    yield node_watch.StopSignals()
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def test_a_stop_that_comes_while_the_engine_starts_ends_the_engine_once_it_is_known(
    stop_signals: node_watch.StopSignals, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window that once left an engine running without its watch: systemd's SIGTERM arrives after the
    engine's fork but before the watch knows the engine. The stop is held, then carried out: the engine's
    process group is ended and the watch exits 128 + SIGTERM, as for any stop."""
    started: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    def popen_then_stop(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        started.append(real_popen(argv, **kwargs))
        os.kill(os.getpid(), signal.SIGTERM)  # delivered before Popen returns to the watch
        return started[-1]

    try:
        monkeypatch.setattr(subprocess, "Popen", popen_then_stop)
        with pytest.raises(SystemExit) as stopped:
            stop_signals.start([sys.executable, "-c", "import time; time.sleep(600)"])
        monkeypatch.undo()
        assert stopped.value.code == 128 + signal.SIGTERM
        assert started and started[0].poll() == -signal.SIGTERM, "the engine was ended, not left running"
    finally:
        for child in started:
            if child.poll() is None:
                child.kill()
                child.wait()


def test_a_stop_while_waiting_for_the_head_ends_the_watch_at_once(stop_signals: node_watch.StopSignals) -> None:
    with pytest.raises(SystemExit) as stopped:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler runs here
    assert stopped.value.code == 128 + signal.SIGTERM
