"""VLLM_FLEET_PROFILE=<file>: profile this run of the program (cProfile, the main thread, from the stack's
load to the interpreter's exit, which includes the SDK's resolution of every output) into that file;
read it with `python -m pstats <file>`; <file>.cpu gets the program's own CPU seconds (user, system). For finding where a large fleet's preview spends its time."""

from __future__ import annotations

import os


def start_if_asked(env: dict[str, str] | None = None) -> None:
    path = (env if env is not None else dict(os.environ)).get("VLLM_FLEET_PROFILE")
    if not path:
        return
    # Imported only when asked: cProfile and its base module are ~1 ms of every run's imports otherwise.
    import atexit
    import cProfile
    import resource
    from pathlib import Path

    profiler = cProfile.Profile()
    profiler.enable()

    def dump() -> None:
        profiler.disable()
        profiler.dump_stats(path)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        Path(path + ".cpu").write_text(f"{usage.ru_utime:.2f} {usage.ru_stime:.2f}\n")

    atexit.register(dump)
