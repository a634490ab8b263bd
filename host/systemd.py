"""The host as the swap transaction uses it: systemctl and journalctl behind one small class the tests
replace with a recording fake, and the parsers of what they print. Standard library only."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping
from pathlib import Path

from host.contract import BACKEND_HEADER, RUNNING_STATES
from host.facts import children_by_parent
from host.processes import run_captured

DEFAULT_START_TIMEOUT = 90.0  # systemd's DefaultTimeoutStartSec

_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)?")
_SPAN_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_timespan(text: str) -> float | None:
    """Seconds of a systemd time span as `systemctl show` prints it ("1h 4min 42s", "90s", "infinity")."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total = 0.0
    position = 0
    for match in _SPAN.finditer(text):
        if text[position : match.start()].strip():
            raise ValueError(f"not a systemd time span: {text!r}")
        total += float(match.group(1)) * _SPAN_SECONDS[match.group(2)]
        position = match.end()
    if text[position:].strip():
        raise ValueError(f"not a systemd time span: {text!r}")
    return total


_SS_PEER_PORT = re.compile(r":(\d+)\s*$")


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show`'s PROPERTY=VALUE lines as a dict."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def established_to(ss_output: str, port: int) -> int:
    """Connections in `ss -Htn state established` output whose peer is `port`: requests the front door
    still carries to an engine (it opens one upstream connection per request, no keepalive)."""
    count = 0
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            match = _SS_PEER_PORT.search(fields[3])
            if match and int(match.group(1)) == port:
                count += 1
    return count


# The title nginx gives a worker that a reload told to finish what it carries and exit.
RETIRING_WORKER_TITLE = b"nginx: worker process is shutting down"


def nginx_workers(master_pid: int, proc: Path = Path("/proc")) -> frozenset[int]:
    """The worker PIDs of the nginx master `master_pid` (none when it does not run)."""
    return frozenset(children_by_parent(proc).get(master_pid, [])) if master_pid > 0 else frozenset()


def retiring_nginx_workers(
    master_pid: int, proc: Path = Path("/proc"), before_reload: frozenset[int] = frozenset()
) -> int:
    """Workers of the nginx master `master_pid` that a reload has retired and that have not exited yet:
    titled so, or among `before_reload`, its workers before the reload. A worker takes the title only once
    it has handled the master's QUIT; until then it still accepts connections and passes them on with the
    old site (the bench saw one reach the old engine after it stopped, on a machine busy with the report)."""
    if master_pid <= 0:
        return 0
    count = 0
    for worker in children_by_parent(proc).get(master_pid, []):
        if worker in before_reload:
            count += 1
            continue
        with contextlib.suppress(OSError):  # gone meanwhile
            count += (proc / str(worker) / "cmdline").read_bytes().startswith(RETIRING_WORKER_TITLE)
    return count


# ---- the host, as the transaction uses it -------------------------------------------------------------


class SystemdHost:
    """systemctl, journalctl and files; one place, so the transaction reads as its steps."""

    def retiring_workers(self, unit: str, before_reload: frozenset[int] = frozenset()) -> int:
        """Workers of the nginx that `unit` runs that a reload retired and that still run: each finishes the
        requests it accepted before the reload, passing them to the upstream of the site as it was then.
        `before_reload`: its workers from before the reload (front_door_workers), whatever they are titled."""
        return retiring_nginx_workers(self.main_pid(unit), before_reload=before_reload)

    def front_door_workers(self, unit: str) -> frozenset[int]:
        """The worker PIDs of the nginx that `unit` runs now."""
        return nginx_workers(self.main_pid(unit))

    def main_pid(self, unit: str) -> int:
        """The unit's main process (0 when it runs none)."""
        return int(self.show(unit, "MainPID").get("MainPID") or 0)

    def run(self, *args: str, check: bool = True) -> str:
        result = run_captured(args)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
        return result.stdout

    def attempt(self, *args: str) -> tuple[int, str]:
        """Exit status and output (stderr after stdout) of a command that may fail."""
        result = run_captured(args)
        return result.returncode, (result.stdout + result.stderr).strip()

    def listens(self, address: str, port: int) -> bool:
        """Whether something accepts TCP connections on `address`:`port` now (refused or silent: no)."""
        import socket

        try:
            with socket.create_connection((address, port), timeout=0.2):
                return True
        except OSError:
            return False

    def backend_behind(self, url: str, headers: Mapping[str, str] | None = None, cafile: str | None = None) -> str:
        """The engine unit the front door says answered a GET of `url` (its header); "" when none did.

        Over TLS the front door's own certificate (`cafile`) is the trust anchor: the check reaches it on
        a loopback address its certificate need not name."""
        # Imported here (~25 ms): `swap start` and the host tools import this module on every swap's path,
        # and only the front door's check needs them.
        import ssl
        import urllib.request

        context = None
        if cafile is not None:
            context = ssl.create_default_context(cafile=cafile)
            context.check_hostname = False
            context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        request = urllib.request.Request(url, headers=dict(headers or {}))
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return str(response.headers.get(BACKEND_HEADER, ""))

    def show(self, unit: str, *props: str) -> dict[str, str]:
        return parse_show(self.run("systemctl", "show", unit, *(f"--property={p}" for p in props), check=False))

    def state(self, unit: str) -> str:
        return self.show(unit, "ActiveState").get("ActiveState", "inactive")

    def running(self, unit: str) -> bool:
        return self.state(unit) in RUNNING_STATES

    def enabled(self, unit: str) -> bool:
        return self.run("systemctl", "is-enabled", unit, check=False).strip() == "enabled"

    def reload_needed(self, unit: str) -> bool:
        """Whether systemd must reload its configuration to start `unit` as its files now are. Asking
        loads a unit it does not hold from disk as it is (then nothing is stale); one it holds says
        NeedDaemonReload when its unit file or a drop-in changed since. A reload runs every generator and
        re-reads every unit (0.1-0.15 s on the sandbox, more on a server with hundreds of units), so a
        swap to a unit name systemd has not loaded since its last stop saves one before its start."""
        props = self.show(unit, "LoadState", "NeedDaemonReload")
        return props.get("LoadState") != "loaded" or props.get("NeedDaemonReload") != "no"

    def unit_file(self, unit: str) -> Path | None:
        path = self.show(unit, "FragmentPath").get("FragmentPath", "")
        return Path(path) if path else None

    def start_timeout(self, unit: str) -> float:
        value = self.show(unit, "TimeoutStartUSec").get("TimeoutStartUSec", "")
        try:
            parsed = parse_timespan(value) if value else DEFAULT_START_TIMEOUT
        except ValueError:
            return DEFAULT_START_TIMEOUT
        # "infinity" (or 0): systemd waits without limit; the rollback waits a day.
        return parsed or 24 * 3600.0

    def journal_cursor(self) -> str:
        out = self.run("journalctl", "-n", "0", "--show-cursor", "-o", "cat", check=False)
        return next(
            (line.removeprefix("-- cursor: ") for line in out.splitlines() if line.startswith("-- cursor: ")), ""
        )

    def journal(
        self, unit: str, cursor: str, lines: int | None = None, own_output: bool = False
    ) -> tuple[list[str], str]:
        """Lines of `unit` after `cursor`, and the cursor after them. `own_output`: only what the unit's
        processes printed, not what systemd says about the unit (`-u` matches both). Following a
        transient unit needs that: once `--collect` unloaded it, the next `systemctl show` makes systemd
        look for its file again and log "Failed to open /run/systemd/transient/...", which reads like a
        failure after a success."""
        match = [f"_SYSTEMD_UNIT={unit}"] if own_output else ["-u", unit]
        args = ["journalctl", *match, "-o", "cat", "--no-pager", "--show-cursor"]
        if cursor:
            args += ["--after-cursor", cursor]
        out = self.run(*args, check=False).splitlines()
        new_cursor = cursor
        if out and out[-1].startswith("-- cursor: "):
            new_cursor = out.pop().removeprefix("-- cursor: ")
        return (out[-lines:] if lines else out), new_cursor


def now() -> float:
    return time.monotonic()
