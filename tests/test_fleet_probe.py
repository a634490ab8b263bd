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
from controller.known_hosts import HostKeys, KeyLine, Pin
from controller.probe import HostUnreachable, probe_all, probe_ssh
from host.contract import Survey
from models.hosts import Host
from models.loader import parse_stack_config
from sandbox.processes import free_port

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
    checked_against: dict[str, Path | None] = {}

    def fake_ssh_survey(
        h: Host,
        private_key: str,
        model_dirs: Any = (),
        timeout: float = 60,
        known_hosts: Path | None = None,
        questions: Any = (),
    ) -> Survey:
        checked_against[h.name] = known_hosts
        time.sleep(DELAY)
        if h.name.startswith("bad"):
            raise host_survey.SurveyFailed(f"host {h.name!r}: the survey of what runs there failed (exit 255)")
        return Survey(gpu_count=len(h.name))

    monkeypatch.setattr(host_survey, "ssh_survey", fake_ssh_survey)
    good = [host("good-a", 22), host("good-b", 22)]
    # good-a's key came from the stack's known_hosts file, good-b's from its own hostKey.
    line = KeyLine(3, "good-a", "ssh-ed25519", "AAAA")
    keys = HostKeys(tmp_path / "known_hosts", {"good-a": Pin(line.key, line), "good-b": Pin(line.key)})
    started = time.monotonic()
    facts = host_survey.survey_all("fleet", good, [], {}, "", tmp_path, preview=True, operation=None, host_keys=keys)
    elapsed = time.monotonic() - started
    assert facts.surveys == {"good-a": Survey(gpu_count=6), "good-b": Survey(gpu_count=6)}
    assert checked_against == {"good-a": tmp_path / "known_hosts", "good-b": None}
    assert elapsed < 1.6 * DELAY, f"two {DELAY:g} s surveys took {elapsed:.2f} s: serialized"

    with pytest.raises(host_survey.SurveyFailed) as raised:
        host_survey.survey_all(
            "fleet", [host("bad-a", 22), *good, host("bad-b", 22)], [], {}, "", tmp_path, preview=True, operation=None
        )
    assert "'bad-a'" in str(raised.value) and "'bad-b'" in str(raised.value)


def test_no_survey_older_than_the_reuse_window_decides_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, dev_raw: dict[str, Any]
) -> None:
    """The update of one `pulumi up` judges the survey its preview read, once, within the window; every
    preview, every other update and every later run reads the host again. A survey kept an hour (as one
    was, when a converged host kept its survey for a no-op) would show a unit stopped since as running."""
    (rd,) = parse_stack_config(dev_raw).resolved_deployments()
    state = ["active"]
    reads: list[float] = []
    clock = [1_000_000.0]

    def fake_ssh_survey(h: Host, *_: Any, **__: Any) -> Survey:
        reads.append(clock[0])
        return Survey.from_dict({"units": [{"name": rd.unit_name, "activeState": state[0]}]})

    monkeypatch.setattr(host_survey, "ssh_survey", fake_ssh_survey)

    def run(preview: bool, operation: str | None = "4242.99", window: float = host_survey.REUSE_SECONDS) -> Any:
        return host_survey.survey_all(
            "dev", [rd.host], [rd], {}, "", tmp_path, preview=preview, operation=operation, window=window,
            clock=lambda: clock[0],
        )  # fmt: skip

    def seen(operation: str | None = "4242.99") -> str:
        return str(run(preview=True, operation=operation).surveys["sandbox"].units[0].active_state)

    # A preview reads the host; the update of the same `pulumi up`, seconds later, takes what it read.
    assert seen() == "active" and len(reads) == 1
    clock[0] += 30
    update = run(preview=False)
    assert len(reads) == 1 and update.reused_age == {"sandbox": 30.0}
    assert "those this `pulumi up`'s preview read" in host_survey.age_line(update, host_survey.REUSE_SECONDS)
    # ... once: the next update reads the host again, and so does every preview.
    state[0] = "inactive"  # stopped by hand
    assert run(preview=False).surveys["sandbox"].units[0].active_state == "inactive" and len(reads) == 2
    assert seen() == "inactive" and len(reads) == 3
    # A `pulumi preview`, then the stop, then a `pulumi up` (another process, or the Automation API's up,
    # which runs no preview): the up reads the host and sees the stop.
    state[0] = "active"
    seen("4242.99")
    state[0] = "inactive"
    assert run(preview=False, operation="5151.7").surveys["sandbox"].units[0].active_state == "inactive"
    assert len(reads) == 5
    # A preview's survey older than the window decides nothing: the update reads the host.
    seen()
    clock[0] += host_survey.REUSE_SECONDS + 1
    run(preview=False)
    assert len(reads) == 7
    # Another config (the deployment's, the model directories asked about) reads the host too.
    seen()
    host_survey.survey_all(
        "dev", [rd.host], [rd], {"sandbox": ["/shared/x"]}, "", tmp_path, preview=False, operation="4242.99"
    )
    assert len(reads) == 9
    # No `pulumi` process to tie the two runs together, or a window of 0: nothing is kept.
    run(preview=True, operation=None)
    run(preview=False, operation=None)
    run(preview=True, window=0)
    run(preview=False, window=0)
    assert len(reads) == 13
    assert host_survey.reuse_seconds({"VLLM_FLEET_SURVEY_REUSE_SECONDS": "0"}) == 0
    assert host_survey.reuse_seconds({"VLLM_FLEET_SURVEY_REUSE_SECONDS": "3600"}) == host_survey.REUSE_SECONDS
    assert host_survey.reuse_seconds({}) == host_survey.REUSE_SECONDS


def test_the_two_runs_of_one_up_are_known_by_the_pulumi_process_that_runs_them(tmp_path: Path) -> None:
    """The program's ancestors as /proc lists them: python (the program) <- pulumi-language-python <-
    pulumi (the CLI of one `pulumi up`, or preview); the operation is that process and its start time."""

    def process(pid: int, name: str, parent: int, start: int) -> None:
        (tmp_path / str(pid)).mkdir()
        fields = ["S", str(parent), *["0"] * 17, str(start), "0"]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")

    process(300, "python3", 200, 777)
    process(200, "pulumi-language", 100, 666)
    process(100, "pulumi", 1, 555)
    assert host_survey.pulumi_operation(tmp_path, 300) == "100.555"
    process(400, "python3", 1, 888)  # not run by the engine
    assert host_survey.pulumi_operation(tmp_path, 400) is None


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
