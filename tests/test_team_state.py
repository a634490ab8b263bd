"""Team state, end to end: two operators (two checkouts) share a stack whose state is in a real
PostgreSQL (sandbox/postgres.py: Debian's server, a throwaway cluster on loopback, TLS verified, a role
with least privilege), and deploy real resources (a host and its storage) to a sandbox host.

The tests run in file order and share one stack. The target is the single-host tests' sandbox host
(the dev one, or VLLM_FLEET_SANDBOX_NAME=fleet-N as sandbox/host.sh reads it).
"""

from __future__ import annotations

import base64
import gzip
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi import automation as auto

from sandbox import engine, sandbox_env
from sandbox.postgres import Cluster, PostgresMissing
from sandbox.processes import run_captured
from sandbox.sandbox_env import on_host

# The module's PostgreSQL test needs no sandbox, but starts a real server: it runs with the others.
pytestmark = pytest.mark.e2e

STACK = "team"
# The team's passphrase (in real life from a secret store, shared by the operators of the stack).
PASSPHRASE = "the-teams-own-passphrase"
STORAGE = "/srv/vllm-fleet-team"
SECOND_STORAGE = "/srv/vllm-fleet-team-b"


class Operator:
    """One operator's checkout of the project, pointed at the shared backend."""

    def __init__(self, work: Path, db: Cluster) -> None:
        self.work = engine.project_copy(work)
        self.env = engine.engine_env(
            work / "unused-local-state",
            {"PULUMI_BACKEND_URL": db.url(), "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, **db.client_env()},
        )
        self.output: list[str] = []
        self.stack: auto.Stack

    def open(self, create: bool) -> auto.Stack:
        options = auto.LocalWorkspaceOptions(
            work_dir=str(self.work),
            pulumi_command=auto.PulumiCommand(root=str(engine.TOOLS)),
            env_vars=self.env,
            secrets_provider="passphrase",
        )
        opener = auto.create_stack if create else auto.select_stack
        self.stack = opener(stack_name=STACK, work_dir=str(self.work), opts=options)
        return self.stack

    def up(self) -> auto.UpResult:
        return self.stack.up(on_output=self.output.append)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_captured(
            ["pulumi", *args, "--stack", STACK, "--non-interactive"], cwd=self.work, env=self.env, timeout=300
        )


class Team:
    def __init__(self, tmp: Path, db: Cluster) -> None:
        self.db = db
        self.first = Operator(tmp / "first", db)
        self.second = Operator(tmp / "second", db)
        self.key_text = sandbox_env.SSH_KEY.read_text()

    def configure(self, storage: str) -> None:
        """The first operator writes the stack file (and its secrets); the second gets it as from git."""
        (self.first.work / f"Pulumi.{STACK}.yaml").write_text(sandbox_env.storage_stack_file(storage))
        self.first.stack.set_config("vllm-fleet:sshPrivateKey", auto.ConfigValue(self.key_text, secret=True))
        self.first.stack.set_config("vllm-fleet:hfToken", auto.ConfigValue(sandbox_env.MIRROR_TOKEN, secret=True))
        shared = (self.first.work / f"Pulumi.{STACK}.yaml").read_text()
        (self.second.work / f"Pulumi.{STACK}.yaml").write_text(shared)

    def locks(self) -> list[str]:
        return self.db.admin(
            "SELECT key FROM pulumi_state WHERE key LIKE '%.pulumi/locks/%'", "vllm_fleet_state"
        ).split()

    def checkpoint(self) -> str:
        """The stack's state as the database holds it, decoded (base64, and gzip when compressed)."""
        rows = self.state_rows()
        (text,) = [
            v for k, v in rows.items() if re.fullmatch(rf"(.*/)?\.pulumi/stacks/vllm-fleet/{STACK}\.json(\.gz)?", k)
        ]
        return text

    def state_rows(self) -> dict[str, str]:
        out = self.db.admin("SELECT key || '|' || (data->>'data') FROM pulumi_state", "vllm_fleet_state")
        rows: dict[str, str] = {}
        for line in out.splitlines():
            key, _, encoded = line.partition("|")
            raw = base64.b64decode(encoded)
            rows[key] = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode(errors="replace")
        return rows


@pytest.fixture(scope="module")
def state_db() -> Iterator[Cluster]:
    """A real PostgreSQL for this module: started here, stopped and removed at the end."""
    try:
        db = Cluster().start()
    except PostgresMissing as missing:
        pytest.fail(str(missing), pytrace=False)
    try:
        yield db
    finally:
        db.stop()


@pytest.fixture(scope="module")
def team(sandbox: None, state_db: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    on_host(f"rm -rf {STORAGE} {SECOND_STORAGE}")
    team = Team(tmp_path_factory.mktemp("team"), state_db)
    team.first.open(create=True)
    team.configure(STORAGE)
    yield team
    # Leave the host as it was found, whatever happened above.
    try:
        if not state_db.running():
            state_db.start_server()
        team.first.cli("cancel", "--yes")
        team.first.stack.refresh(clear_pending_creates=True)
        team.first.stack.destroy(on_output=team.first.output.append)
        team.first.stack.workspace.remove_stack(STACK)
    finally:
        on_host(f"rm -rf {STORAGE} {SECOND_STORAGE}")


def test_role_has_least_privilege(state_db: Cluster) -> None:
    assert state_db.as_role("SELECT count(*) FROM pulumi_state").stdout.strip() == "0"
    for sql in ("CREATE TABLE other (a int)", "CREATE DATABASE other", "CREATE ROLE other", "DROP TABLE pulumi_state"):
        refused = state_db.as_role(sql)
        assert refused.returncode != 0 and re.search(r"permission denied|must be owner", refused.stderr), sql
    plain = run_captured(
        ["psql", state_db.url().split("?")[0] + "?sslmode=disable", "-c", "SELECT 1"],
        env={"PATH": "/usr/bin:/bin", **state_db.client_env()},
    )
    assert plain.returncode != 0 and "no pg_hba.conf entry" in plain.stderr  # TLS or nothing


def test_concurrent_up_is_refused_with_the_lock_owner_and_the_first_completes(team: Team) -> None:
    outcome: dict[str, Any] = {}

    def first() -> None:
        try:
            outcome["result"] = team.first.up()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=first)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not team.locks() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert team.locks(), f"the first operator's `pulumi up` never took the lock: {outcome.get('error')}"
        team.second.open(create=False)
        with pytest.raises(auto.CommandError) as refused:
            team.second.up()
        first_still_running = thread.is_alive()
    finally:
        thread.join(timeout=600)
    message = str(refused.value)
    assert first_still_running, "the first `pulumi up` ended before the second was refused: nothing was tested"
    assert "the stack is currently locked by 1 lock(s)" in message, message
    assert re.search(r"created by \S+@\S+ \(pid \d+\) at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", message), message
    assert team.db.password not in message and "postgres://****:****@127.0.0.1" in message, message
    assert "error" not in outcome, outcome.get("error")
    assert outcome["result"].summary.result == "succeeded"
    assert team.locks() == []  # the refused run left no lock of its own
    assert on_host(f"test -f {STORAGE}/.vllm-fleet-keep.{STACK} && echo present").strip() == "present"


def test_second_operator_sees_the_deployment_and_its_outputs(team: Team) -> None:
    team.second.stack.preview(expect_no_changes=True)
    first = {k: v.value for k, v in team.first.stack.outputs().items()}
    second = {k: v.value for k, v in team.second.stack.outputs().items()}
    assert second == first
    assert second["storage"]["team1"]["path"] == STORAGE
    assert second["hosts"]["sandbox"]


def test_secrets_stay_encrypted_in_the_database(team: Team) -> None:
    rows = team.state_rows()
    assert any(".pulumi/stacks/vllm-fleet/" in key for key in rows), list(rows)
    key_body = [line for line in team.key_text.splitlines() if line and not line.startswith("-----")]
    for key, text in rows.items():
        for secret in (*key_body, sandbox_env.MIRROR_TOKEN):
            assert secret not in text, f"plaintext secret in the row {key}"
    checkpoint = team.checkpoint()
    # The key reached every step's connection, as ciphertext.
    assert checkpoint.count('"ciphertext"') >= 3, checkpoint[:2000]


def test_database_restart_loses_nothing(team: Team) -> None:
    before = team.checkpoint()
    team.db.stop_server()
    assert not team.db.running()
    team.db.start_server()
    assert team.checkpoint() == before
    result = team.first.up()
    assert result.summary.result == "succeeded"
    assert set((result.summary.resource_changes or {}).keys()) == {"same"}, result.summary.resource_changes
    team.second.stack.preview(expect_no_changes=True)


def test_killed_controller_leaves_a_lock_and_a_pending_create_that_cancel_and_refresh_clear(team: Team) -> None:
    """The storage moves to a path where its layout step blocks on the host (a FIFO where it writes), so
    the step is in flight when the controller is killed, as a lost laptop would be."""
    team.configure(SECOND_STORAGE)
    on_host(f"mkdir -p {SECOND_STORAGE} && mkfifo {SECOND_STORAGE}/.vllm-fleet-keep.{STACK}.tmp")
    log = team.first.work / "killed-up.log"
    try:
        with log.open("w") as out, engine.up_killed_on_exit(team.first.work, team.first.env, STACK, out) as process:
            deadline = time.monotonic() + 180
            while (
                '"pending_operations"' not in team.checkpoint()
                and process.poll() is None
                and time.monotonic() < deadline
            ):
                time.sleep(0.5)
            assert '"pending_operations"' in team.checkpoint(), f"no step was in flight: {log.read_text()}"
    finally:
        on_host(f"timeout 2 cat {SECOND_STORAGE}/.vllm-fleet-keep.{STACK}.tmp >/dev/null || true")
        on_host(f"rm -f {SECOND_STORAGE}/.vllm-fleet-keep.{STACK}.tmp")
    assert len(team.locks()) == 1
    assert "team1-layout" in team.checkpoint().split('"pending_operations"')[1]
    # The other operator is refused, told whose lock it is: the dead run's.
    refused = team.second.cli("up", "--yes", "--skip-preview")
    assert refused.returncode != 0
    assert f"(pid {process.pid})" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    # What docs/troubleshooting.md says: `pulumi cancel` (the run that holds the lock is known dead), then
    # `pulumi refresh --clear-pending-creates`, then `pulumi up`.
    cancel = team.second.cli("cancel", "--yes")
    assert cancel.returncode == 0, cancel.stderr
    assert team.locks() == []
    refresh = team.second.cli("refresh", "--yes", "--clear-pending-creates")
    assert refresh.returncode == 0, refresh.stdout + refresh.stderr
    assert '"pending_operations"' not in team.checkpoint()
    result = team.second.up()
    assert result.summary.result == "succeeded"
    assert on_host(f"test -f {SECOND_STORAGE}/.vllm-fleet-keep.{STACK} && echo present").strip() == "present"
    team.first.stack.preview(expect_no_changes=True)
