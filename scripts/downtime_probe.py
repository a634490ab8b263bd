"""vllm-fleet downtime probe: what a client of a deployment sees while it swaps.

    .venv/bin/python -m scripts.downtime_probe --url http://127.0.0.1:18000/v1 --model chat [--seconds 120]

A user's view, not the controller's: a one-token completion every --interval seconds (default 0.1)
through the real OpenAI client with retries off, so every request that does not come back with an
answer counts. It reports the requests sent, the failed ones, the stalled ones (answered, but later
than --stall seconds), and the downtime: the longest gap between two successful answers. The
end-to-end tests and `make bench` run it through every swap; run it by hand beside a `pulumi up`.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.api_client import client, default_ca_file


@dataclass(frozen=True)
class Answer:
    started: float
    ended: float
    ok: bool
    error: str = ""
    # The HTTP status of a failed request ("" when none came: refused, reset, timed out).
    status: str = ""


@dataclass
class DowntimeProbe:
    base_url: str
    model: str
    interval: float = 0.1
    timeout: float = 10.0
    stall_seconds: float = 1.0
    # The key each request sends (a client that switches keys sets it while the probe runs), and the CA
    # its TLS is verified against (None: the system's).
    api_key: str | None = None
    ca_file: str | None = None
    answers: list[Answer] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def run(self) -> None:
        openai = client(self.base_url, self.api_key, self.ca_file, max_retries=0, timeout=self.timeout)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                completion = openai.with_options(api_key=self.api_key or "none").completions.create(
                    model=self.model, prompt="hello", max_tokens=1
                )
                answer = Answer(started, time.monotonic(), bool(completion.choices))
            except Exception as error:  # every way a request can fail is a failed request
                status = str(getattr(error, "status_code", "") or "")
                answer = Answer(started, time.monotonic(), False, f"{type(error).__name__}: {error}"[:200], status)
            self.answers.append(answer)
            time.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def start(self) -> DowntimeProbe:
        self._thread = threading.Thread(target=self.run, name="downtime-probe", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 5)

    def report(self, start: float | None = None, end: float | None = None) -> dict[str, Any]:
        """Requests that started in [start, end): counts, the longest gap and latencies."""
        answers = list(self.answers)
        if not answers:
            return {
                "requests": 0,
                "failed": 0,
                "stalled": 0,
                "longest_gap_s": None,
                "errors": [],
                "failed_by_status": {},
            }
        start = answers[0].started if start is None else start
        end = answers[-1].ended if end is None else end
        window = [a for a in answers if start <= a.started < end]
        ok = [a for a in window if a.ok]
        times = [start] + [a.ended for a in ok] + [end]
        latencies = sorted(a.ended - a.started for a in ok)
        return {
            "requests": len(window),
            "failed": len(window) - len(ok),
            "stalled": sum(1 for a in ok if a.ended - a.started > self.stall_seconds),
            "longest_gap_s": round(max(b - a for a, b in itertools.pairwise(times)), 3),
            "latency_p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "latency_max_s": round(latencies[-1], 3) if latencies else None,
            "errors": sorted({a.error for a in window if a.error})[:5],
            "failed_by_status": dict(Counter(a.status or "no answer" for a in window if not a.ok)),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="the deployment's endpoint, e.g. http://127.0.0.1:18000/v1")
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--stall", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (default: at Ctrl-C)")
    parser.add_argument("--api-key-file", default=None, help="a file holding the API key to send")
    parser.add_argument("--ca-file", default=None, help="CA to verify TLS against (default: the sandbox's, locally)")
    args = parser.parse_args(argv)
    key = Path(args.api_key_file).read_text().strip() if args.api_key_file else None
    ca_file = args.ca_file or default_ca_file(args.url)
    probe = DowntimeProbe(
        args.url,
        args.model,
        args.interval,
        stall_seconds=args.stall,
        api_key=key,
        ca_file=str(ca_file) if ca_file else None,
    ).start()
    began = time.monotonic()
    try:
        while not args.seconds or time.monotonic() - began < args.seconds:
            time.sleep(5)
            report = probe.report()
            print(
                f"{time.monotonic() - began:6.0f} s  requests {report['requests']}  failed {report['failed']}  "
                f"stalled {report['stalled']}  longest gap {report['longest_gap_s']} s",
                flush=True,
            )
    except KeyboardInterrupt:
        pass
    probe.stop()
    report = probe.report()
    print(report)
    return 0 if report["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
