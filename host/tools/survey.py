#!/usr/bin/env python3
"""vllm-fleet survey: what already runs on a host, read-only, as one JSON document on stdout (a
host/contract.Survey; host/survey.py reads it and says what each entry holds).

    survey [--python VENV_PYTHON] [--model-dir DIR ...] [--question LAUNCH_QUESTION_JSON ...]

The controller runs it over SSH in every program run (`pulumi preview` too), before the tools are
installed, by piping the host package into the host's python (render/host_bundle.bootstrap_source).
Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from host.contract import LaunchQuestion
from host.survey import survey, vllm_facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="survey", description="what already runs on this host, as JSON")
    parser.add_argument("--python", help="the vLLM venv's python: report its vLLM version as well")
    parser.add_argument(
        "--model-dir", action="append", default=[], help="a model directory to check against its manifest"
    )
    parser.add_argument(
        "--question",
        action="append",
        default=[],
        help="JSON of a host/contract.LaunchQuestion: how a deployment's serving engine was launched against the stack's",
    )
    args = parser.parse_args(argv)
    questions = [LaunchQuestion.from_dict(json.loads(text)) for text in args.question]
    with ThreadPoolExecutor(max_workers=1) as pool:
        vllm = pool.submit(vllm_facts, args.python) if args.python else None
        found = survey(args.model_dir, questions)
        if vllm is not None:
            version, extras = vllm.result()
            found = dataclasses.replace(found, vllm_version=version, vllm_extras=extras)
    json.dump(found.to_dict(), sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
