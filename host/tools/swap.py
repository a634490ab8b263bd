#!/usr/bin/env python3
"""vllm-fleet swap: make a deployment serve its staged unit, as a transaction that the host finishes.

    swap start --plan PLAN.json [--report SPEC [--bench]]
                                  what the Pulumi step runs: start the transaction as a transient systemd
                                  unit (or attach to the one already running for this deployment), print
                                  its journal as it goes, and exit with its result; when it serves, the
                                  post-deploy report of host/status.py on SPEC, one JSON line before the
                                  result's (the step's stdout is the stack's `report` output)
    swap run --plan PLAN.json     the transaction itself (host/transaction.py), inside that unit

It runs in its own systemd unit (`systemd-run`), so a dropped SSH session or a killed controller neither
interrupts it nor leaves the host serving nothing; the result is written to the deployment's state
directory, where the next `swap start` finds it. Standard library only.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from host.contract import ENGINE_READY_FILE, RUNNING_STATES, ActiveRecord, Plan, Result
from host.locks import take_lock
from host.swap_files import write_file
from host.systemd import SystemdHost


def result_path(plan: Plan) -> Path:
    return Path(plan.state_dir) / "swap-result.json"


def run_transaction(plan_file: str) -> int:
    # Imported here: the step's side (`swap start`) runs on the swap's path too and needs none of it.
    from host.transaction import STATE_ROOT, Transaction, host_lock

    plan = Plan.load(plan_file)
    with host_lock(STATE_ROOT):
        transaction = None
        try:
            transaction = Transaction(plan, log=lambda m: print(m, flush=True))
            result = transaction.run()
        except Exception as error:  # the result must be written whatever happens
            result = Result(
                "rollback-failed", f"swap transaction crashed: {type(error).__name__}: {error}", plan.digest
            )
        write_file(result_path(plan), json.dumps(asdict(result)), make_parent=False)
        # The step ends on this line (follow); what comes after it is the host's to finish, under the lock.
        print(last_line(result), flush=True)
        if transaction is not None:
            try:
                transaction.after_result(lambda: steps_done(plan_file))
            except Exception as error:
                print(f"after the result: {type(error).__name__}: {error}", flush=True)
    return 0 if result.ok else 1


# The step that starts a transaction holds a shared lock on the plan file until it exits, however it ends:
# the kernel drops it with the process, so a step whose controller was killed holds nothing (a mark file
# it was to remove had held the transaction up). The transaction's reload after its result waits for it,
# at most STEP_WAIT: while systemd reloads it answers no systemctl, and the step's report reads the new
# unit's state.
STEP_WAIT = 5.0


def steps_done(plan_file: str, wait: float = STEP_WAIT) -> bool:
    """Wait until no step holds the plan file, at most `wait` s: whether none does."""
    with open(plan_file, encoding="utf-8") as handle:
        return take_lock(handle, wait=wait, poll=0.02)


def last_line(result: Result) -> str:
    """The transaction's last line, which it prints right after writing its result."""
    return ("" if result.ok else "FAILED: ") + result.message.splitlines()[0]


# ---- the Pulumi step's side: start or attach, follow, report ------------------------------------------


# How often the step reads the transaction's journal and state (a journalctl and a systemctl, some 20 ms
# each), so its lines show with at most this delay; between reads it looks for the result file (a stat)
# every RESULT_POLL, so the step ends within about that of the transaction.
FOLLOW_POLL = 0.25
RESULT_POLL = 0.05
# Once the result is written the transaction says its last line (last_line) and the step ends on it; the
# step reads the journal this often until then (or until the unit is gone, then once more after
# JOURNAL_SETTLE for lines journald had not yet stored).
FINISH_POLL = 0.01
JOURNAL_SETTLE = 0.03
# A transaction whose last line has not come this long after its result: the result stands.
FINISH_WAIT = 2.0


def follow(
    plan: Plan,
    host: SystemdHost,
    out: Callable[[str], None],
    cursor: str,
    poll: float = FOLLOW_POLL,
    tick: Callable[[], None] = lambda: None,
) -> None:
    """Print the transaction unit's journal after `cursor` until it says its last line after its result
    (last_line), or the unit is gone (collected when it ends). `tick` runs at every look for the result
    (every RESULT_POLL)."""
    before = result_stamp(plan)  # an attached transaction's result file may be an earlier one's
    written_at: float | None = None
    final: str | None = None  # its last line, once its result is written
    while True:
        lines, cursor = host.journal(plan.transaction_unit, cursor, own_output=True)
        for line in lines:
            out(line)
        if final is not None and final in lines:
            return  # what it does after its result (forgetting removed units) is the host's
        if host.show(plan.transaction_unit, "ActiveState").get("ActiveState", "inactive") not in RUNNING_STATES:
            # journald may still be writing the last lines; the result itself is read from its file.
            time.sleep(min(poll, RESULT_POLL if written_at is None else JOURNAL_SETTLE))
            lines, cursor = host.journal(plan.transaction_unit, cursor, own_output=True)
            for line in lines:
                out(line)
            return
        if written_at is None:
            if wait_for_result(plan, poll, before, tick):
                written_at = time.monotonic()
                try:
                    result = read_result(plan)
                except (ValueError, TypeError):  # not a result this code reads: follow the unit to its end
                    result = None
                final = last_line(result) if result is not None else None
                # The read above may have come after the result and its last line already (the result
                # was written as wait_for_result's previous look ended): no later read shows it again.
                if final is not None and final in lines:
                    return
        elif time.monotonic() - written_at > FINISH_WAIT:
            return
        else:
            time.sleep(FINISH_POLL)


def mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def result_stamp(plan: Plan) -> int | None:
    return mtime_ns(result_path(plan))


def wait_for_result(plan: Plan, poll: float, before: int | None, tick: Callable[[], None] = lambda: None) -> bool:
    """Up to `poll`, or until the transaction has written its result: whether it has."""
    deadline = time.monotonic() + poll
    while True:
        time.sleep(min(RESULT_POLL, poll))
        tick()
        stamp = result_stamp(plan)
        if stamp is not None and stamp != before:
            return True
        if time.monotonic() >= deadline:
            return False


def read_result(plan: Plan) -> Result | None:
    path = result_path(plan)
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return Result(**data)


# The post-deploy report: host/status.py's reading of the deployment's SPEC, with its smoke benchmark or not,
# given what its engines' part (Measurer: load and benchmark) found when that already ran (None: it runs it).
Reporter = Callable[[dict[str, Any], bool, "dict[str, Any] | None"], dict[str, Any]]
Measurer = Callable[[dict[str, Any], bool], dict[str, Any]]


def status_report(spec: dict[str, Any], with_bench: bool, measured: dict[str, Any] | None) -> dict[str, Any]:
    from host import status  # the report's reads and its benchmark: only once the transaction serves

    return status.report(spec, with_bench, measured).to_dict()


def status_measure(spec: dict[str, Any], with_bench: bool) -> dict[str, Any]:
    from host import status

    return status.measure(spec, with_bench)


class EarlyReport:
    """The post-deploy report, started once the transaction records the new unit as the deployment's active
    one (`active` in its state directory: it serves behind the front door, and nothing after that rolls
    back), so that it runs beside what the swap still does then: blue/green's drain, the old engine's stop
    (vLLM takes 0.5-1 s to exit). Its smoke benchmark starts earlier, as soon as the new engine answers
    (the transaction's ENGINE_READY_FILE names it), on that engine alone, before clients reach it. Read
    only when the result says it serves; a swap that ends otherwise never shows it. Started at the end
    when no record came (nothing changed)."""

    def __init__(
        self,
        plan: Plan,
        spec: dict[str, Any],
        with_bench: bool,
        reporter: Reporter,
        measurer: Measurer = status_measure,
    ) -> None:
        state_dir = Path(plan.state_dir)
        self.active, self.ready = state_dir / "active", state_dir / ENGINE_READY_FILE
        self.before, self.ready_before = mtime_ns(self.active), mtime_ns(self.ready)
        self.unit = plan.unit_name
        self.reporter, self.measurer, self.spec, self.with_bench = reporter, measurer, spec, with_bench
        self.thread: threading.Thread | None = None
        self.measuring: threading.Thread | None = None
        self.measured: dict[str, Any] | None = None
        self.found: dict[str, Any] = {}
        self.error: Exception | None = None

    def names_the_unit(self, path: Path, before: int | None) -> bool:
        """Whether `path` was written since `before` and names this plan's unit (a record or a marker)."""
        stamp = mtime_ns(path)
        if stamp is None or stamp == before:
            return False
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:
            return False
        record = ActiveRecord.parse(text) if path == self.active else None
        return (record.unit if record is not None else text.strip()) == self.unit

    def tick(self) -> None:
        if self.with_bench and self.measuring is None and self.names_the_unit(self.ready, self.ready_before):
            self.begin_measuring()
        if self.thread is None and self.names_the_unit(self.active, self.before):
            self.begin()

    def begin_measuring(self) -> None:
        def run() -> None:
            try:
                self.measured = self.measurer(self.spec, self.with_bench)
            except Exception as error:  # raised again by result()
                self.error = error

        self.measuring = threading.Thread(target=run, name="post-deploy-benchmark", daemon=True)
        self.measuring.start()

    def begin(self) -> None:
        def run() -> None:
            try:
                if self.measuring is not None:
                    self.measuring.join()
                    if self.error is not None:
                        return
                self.found = self.reporter(self.spec, self.with_bench, self.measured)
            except Exception as error:  # raised again in the step's thread, by result()
                self.error = error

        self.thread = threading.Thread(target=run, name="post-deploy-report", daemon=True)
        self.thread.start()

    def result(self) -> dict[str, Any]:
        if self.thread is None:
            self.begin()
        assert self.thread is not None
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.found


def start(
    plan_file: str,
    host: SystemdHost | None = None,
    poll: float = FOLLOW_POLL,
    report_spec: dict[str, Any] | None = None,
    with_bench: bool = False,
    reporter: Reporter = status_report,
) -> int:
    """Start or attach, follow, and say the result; when it serves and `report_spec` is given, the report
    first. The report was a step of its own after this one: run here, in the same SSH session and process,
    a swap no longer waits for a second session and a second start of the host package (~0.4 s)."""
    plan = Plan.load(plan_file)
    host = host or SystemdHost()
    early: EarlyReport | None = None

    def watch() -> Callable[[], None]:
        """A report watching for the transaction about to be followed (not one attached to before it)."""
        nonlocal early
        early = None if report_spec is None else EarlyReport(plan, report_spec, with_bench, reporter)
        return early.tick if early is not None else (lambda: None)

    def finish(result: Result) -> int:
        if result.ok and early is not None:
            try:
                found = early.result()
            except Exception as error:  # the swap stands; the step fails so that the next up reports again
                print(
                    f"swap result: {result.status}: {result.message.splitlines()[0]}; but the post-deploy report "
                    f"failed ({type(error).__name__}: {error}): run pulumi up again for it",
                    file=sys.stderr,
                    flush=True,
                )
                return 1
            print(json.dumps(found, sort_keys=True), flush=True)
        return say_result(result)

    def out(line: str) -> None:
        print(line, flush=True)

    earlier = result_stamp(plan)
    if host.running(plan.transaction_unit):
        out(
            f"[{plan.deployment}] a swap transaction is already running on this host ({plan.transaction_unit}): attaching"
        )
        follow(plan, host, out, host.journal_cursor(), poll, watch())
        previous = read_result(plan)
        if previous is None or previous.plan_digest != plan.digest:
            out(f"[{plan.deployment}] that transaction was for another plan; starting this one")
        elif result_stamp(plan) == earlier:
            # Its result was written before this step came (e.g. the transaction of an up whose controller
            # was killed, finishing on the host): this step saw none of it; its own transaction looks again.
            out(f"[{plan.deployment}] that transaction had already ended this plan; starting this one to check it")
        else:
            return finish(previous)
    result_path(plan).unlink(missing_ok=True)
    # Held until this step exits (steps_done): the transaction's reload after its result waits for it.
    with open(plan_file, encoding="utf-8") as step_lock:
        fcntl.flock(step_lock, fcntl.LOCK_SH)
        cursor = host.journal_cursor()
        host.run(
            "systemd-run",
            f"--unit={plan.transaction_unit}",
            "--collect",
            "--quiet",
            f"--description=vllm-fleet swap of deployment {plan.owner}",
            plan.python,
            f"{plan.tools_dir}/swap",
            "run",
            "--plan",
            plan_file,
        )
        follow(plan, host, out, cursor, poll, watch())
        result = read_result(plan)
        if result is None:
            print(
                f"swap transaction {plan.transaction_unit} ended without a result; see journalctl -u {plan.transaction_unit}",
                file=sys.stderr,
            )
            return 1
        return finish(result)


def say_result(result: Result) -> int:
    """Say the result from its file: the journal's last lines may reach journald after the unit is gone.
    The step's last line, so it is what the step shows when it ends."""
    if result.ok:
        print(f"swap result: {result.status}: {result.message.splitlines()[0]}", flush=True)
        return 0
    print(result.message, file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["start", "run"])
    parser.add_argument("--plan", required=True)
    parser.add_argument("--report", help="start: the deployment's status spec (JSON) to report once it serves")
    parser.add_argument("--bench", action="store_true", help="start: the report runs its smoke benchmark")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_transaction(args.plan)
    return start(args.plan, report_spec=None if args.report is None else json.loads(args.report), with_bench=args.bench)


if __name__ == "__main__":
    sys.exit(main())
