#!/usr/bin/env python3
"""vllm-fleet wait-ready: runs as ExecStartPost, so a vLLM unit is "active" only once it serves.

Ready means all three, in order: GET /health answers 200, GET /v1/models lists the served name, and a
one-token completion succeeds. A 36-minute load is normal for a 500 GB model, so this waits up to
--timeout seconds and prints progress every --report seconds for `journalctl` and `pulumi up` to show.
It gives up early when the engine process ($MAINPID, set by systemd) has exited. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from host.adapters import Engine, Fetch, engine_request, load_for_engine


def probe(base: str, served_name: str, fetch: Fetch = engine_request) -> tuple[bool, str]:
    """One readiness check; returns (ready, what is missing)."""
    try:
        status, _ = fetch(f"{base}/health", None, 5)
        if status != 200:
            return False, f"/health answered {status}"
        status, body = fetch(f"{base}/v1/models", None, 5)
        if status != 200:
            return False, f"/v1/models answered {status}"
        names = [m.get("id") for m in json.loads(body).get("data", [])]
        if served_name not in names:
            return False, f"/v1/models lists {names}, not {served_name!r}"
        problem = Engine(base, fetch).answers(served_name)
        if problem is not None:
            return False, problem
    except (OSError, ValueError) as error:
        return False, f"not answering yet ({error.__class__.__name__}: {error})"
    return True, "ready"


def engine_alive() -> bool:
    pid = os.environ.get("MAINPID")
    return not pid or os.path.exists(f"/proc/{pid}")


def wait(
    base: str,
    served_name: str,
    timeout: float,
    report: float,
    log: Callable[[str], None],
    fetch: Fetch = engine_request,
    alive: Callable[[], bool] = engine_alive,
    # One GET of /health on loopback (refused, ~1 ms, until the server listens): the swap learns of
    # readiness within 0.2 s, and in a stop-then-start swap each tenth of a second is downtime.
    poll: float = 0.2,
) -> bool:
    start = time.monotonic()
    last_report = -report
    while True:
        ready, detail = probe(base, served_name, fetch)
        elapsed = time.monotonic() - start
        if ready:
            log(f"ready: {served_name} answers on {base} after {elapsed:.0f} s")
            return True
        if not alive():
            log(f"not ready: the engine process exited after {elapsed:.0f} s ({detail})")
            return False
        if elapsed >= timeout:
            log(f"not ready after {timeout:g} s: {detail}")
            return False
        if elapsed - last_report >= report:
            log(f"loading {served_name}: {elapsed:.0f}/{timeout:g} s, {detail}")
            last_report = elapsed
        time.sleep(poll)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-name", required=True)
    parser.add_argument("--timeout", type=float, required=True)
    parser.add_argument("--report", type=float, default=15)
    parser.add_argument("--unit", default="")
    parser.add_argument("--host", default="127.0.0.1")
    # With LoRA: the deployment's adapters file and the model this engine serves; the adapters that fit
    # it are loaded, and each must answer, before the unit counts as started.
    parser.add_argument("--adapters", type=Path)
    parser.add_argument("--model-path", default="")
    args = parser.parse_args(argv)
    base = f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}"

    def log(message: str) -> None:
        print(f"wait-ready{' ' + args.unit if args.unit else ''}: {message}", flush=True)

    ok = wait(base, args.served_name, args.timeout, args.report, log)
    if ok and args.adapters is not None:
        ok = load_for_engine(Engine(base), args.adapters, args.model_path, log)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
