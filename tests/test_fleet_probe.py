"""Issue 13 item 4: the program contacts a fleet's hosts at once, so one slow host does not hold up the
others, and an error still names every host that failed. Loopback only: no sandbox, no SSH login."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controller import probe
from controller import survey as host_survey
from controller.probe import HostUnreachable, probe_all, probe_ssh
from models.hosts import Host
from models.loader import parse_stack_config
from tests.support.processes import free_port

DELAY = 1.0


def host(name: str, port: int) -> Host:
    return Host.model_validate({"name": name, "address": "127.0.0.1", "port": port, "gpus": {"count": 0}})


@pytest.fixture
def slow_sshd() -> Iterator[list[int]]:
    """Two ports that accept at once and send an SSH banner only after DELAY seconds."""
    servers = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    stop = threading.Event()

    def serve(server: socket.socket) -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Timer(DELAY, lambda c=conn: (c.sendall(b"SSH-2.0-slow\r\n"), c.close())).start()

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in servers]
    for thread in threads:
        thread.start()
    yield [int(s.getsockname()[1]) for s in servers]
    stop.set()
    for thread in threads:
        thread.join()
    for server in servers:
        server.close()


def test_slow_hosts_are_probed_at_once(slow_sshd: list[int]) -> None:
    started = time.monotonic()
    probe_all([host("slow-a", slow_sshd[0]), host("slow-b", slow_sshd[1])])
    elapsed = time.monotonic() - started
    assert DELAY <= elapsed < 1.6 * DELAY, f"two {DELAY:g} s probes took {elapsed:.2f} s: serialized"


def test_every_unreachable_host_is_named(slow_sshd: list[int]) -> None:
    hosts = [host("down-a", free_port()), host("slow-a", slow_sshd[0]), host("down-b", free_port())]
    with pytest.raises(HostUnreachable) as raised:
        probe_all(hosts)
    message = str(raised.value)
    assert "'down-a'" in message and "'down-b'" in message
    assert "slow-a" not in message
    assert message.index("'down-a'") < message.index("'down-b'")


def test_surveys_run_at_once_and_every_failure_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def fake_ssh_survey(h: Host, private_key: str, timeout: float = 60) -> dict[str, Any]:
        time.sleep(DELAY)
        if h.name.startswith("bad"):
            raise host_survey.SurveyFailed(f"host {h.name!r}: the survey of what runs there failed (exit 255)")
        return {"host": h.name}

    monkeypatch.setattr(host_survey, "ssh_survey", fake_ssh_survey)
    good = [host("good-a", 22), host("good-b", 22)]
    started = time.monotonic()
    found = host_survey.survey_all("fleet", good, [], "", tmp_path)
    elapsed = time.monotonic() - started
    assert found == {"good-a": {"host": "good-a"}, "good-b": {"host": "good-b"}}
    assert elapsed < 1.6 * DELAY, f"two {DELAY:g} s surveys took {elapsed:.2f} s: serialized"

    with pytest.raises(host_survey.SurveyFailed) as raised:
        host_survey.survey_all("fleet", [host("bad-a", 22), *good, host("bad-b", 22)], [], "", tmp_path)
    assert "'bad-a'" in str(raised.value) and "'bad-b'" in str(raised.value)


def test_a_survey_that_found_work_to_do_is_read_again_once_that_work_is_done(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dev_raw: dict[str, Any]
) -> None:
    # The dev stack's deployment `chat`; the host first runs another unit for it (a swap to do), then its own.
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    active_unit = ["vllm-before.service"]
    surveys: list[float] = []

    def fake_ssh_survey(h: Host, private_key: str, timeout: float = 60) -> dict[str, Any]:
        surveys.append(time.time())
        return {"active": {"dev.chat": {"unit": active_unit[0]}}, "units": []}

    monkeypatch.setattr(host_survey, "ssh_survey", fake_ssh_survey)
    clock = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])

    def survey() -> dict[str, Any]:
        return host_survey.survey("dev", rd.host, [rd], "", tmp_path)

    survey()
    clock[0] += 10  # the same `pulumi up`'s update run, seconds later: the preview's survey serves it
    survey()
    assert len(surveys) == 1
    active_unit[0] = rd.unit_name  # the up swapped the host
    clock[0] += host_survey.PENDING_SECONDS
    assert survey()["active"]["dev.chat"]["unit"] == rd.unit_name and len(surveys) == 2
    clock[0] += host_survey.CACHE_SECONDS - 1  # converged: a no-op reads the cache for an hour
    survey()
    assert len(surveys) == 2


def test_the_probe_says_who_it_is_before_it_leaves() -> None:
    # sshd logs a client that reads its banner and closes without a word as an error
    # (kex_exchange_identification), one a client that identified itself as a plain close.
    server = socket.create_server(("127.0.0.1", 0))
    heard: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3\r\n")
            conn.settimeout(5)
            while chunk := conn.recv(256):
                heard.append(chunk)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        assert probe_ssh(host("sshd", int(server.getsockname()[1]))) == "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3"
        thread.join(5)
    finally:
        server.close()
    assert b"".join(heard) == b"SSH-2.0-vllm-fleet-probe\r\n"


def test_probes_run_at_most_probe_workers_at_once(slow_sshd: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A fleet's probes do not open a socket per host at once."""
    monkeypatch.setattr(probe, "PROBE_WORKERS", 1)
    started = time.monotonic()
    probe_all([host("slow-a", slow_sshd[0]), host("slow-b", slow_sshd[1])])
    elapsed = time.monotonic() - started
    assert elapsed >= 2 * DELAY, f"two {DELAY:g} s probes with one worker took {elapsed:.2f} s: not bounded"
