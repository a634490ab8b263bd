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
import urllib.error
import urllib.request
from collections.abc import Callable


def _request(url: str, body: dict[str, object] | None, timeout: float) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    api_key = os.environ.get("VLLM_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


Fetch = Callable[[str, "dict[str, object] | None", float], "tuple[int, str]"]


def probe(base: str, served_name: str, fetch: Fetch = _request) -> tuple[bool, str]:
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
        status, body = fetch(f"{base}/v1/completions", {"model": served_name, "prompt": "ping", "max_tokens": 1}, 60)
        if status != 200 or not json.loads(body).get("choices"):
            return False, f"a one-token completion answered {status}: {body[:200]}"
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
    fetch: Fetch = _request,
    alive: Callable[[], bool] = engine_alive,
    poll: float = 0.5,  # one GET of /health on loopback: the swap learns of readiness within half a second
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
    args = parser.parse_args(argv)
    ok = wait(
        f"http://{f'[{args.host}]' if ':' in args.host else args.host}:{args.port}",
        args.served_name,
        args.timeout,
        args.report,
        lambda m: print(f"wait-ready{' ' + args.unit if args.unit else ''}: {m}", flush=True),
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
