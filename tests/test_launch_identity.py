"""Launch identity with the sandbox's real vLLM (0.32, CPU build): the stack's launch as render/units.py
writes it, and hand-made launches that spell it otherwise or really differ, read by the host's own parser
the way the survey will read them (the host package piped into the host's python3, which has the vLLM
venv's Python parse; nothing installed). No engine starts: only vLLM's parser and its variable table run.
The second read of the same launches comes from the host's cache and imports no vLLM."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import yaml

from host.contract import STATE_DIR
from host.facts import exec_start, unit_environment
from host.launch_identity import ADOPTION, SAME_UNIT, Launch, Outcome, differences, split_launch
from models.loader import parse_stack_config, read_stack_file
from render import host_bundle
from render.units import render_unit
from sandbox import sandbox_env
from sandbox.processes import run_captured
from sandbox.sandbox_env import on_host
from tests.support.paths import ROOT

PYTHON = "/opt/vllm-env/bin/python3"
MODEL = "/tmp/launch-identity/tiny-chat-a"
LINK = "/tmp/launch-identity/model-link"  # a link to MODEL: the same model files
INPUT = "/tmp/launch-identity/launches.json"
CACHE = f"{STATE_DIR}/parsed-launches-e2e"


def stack_launch() -> Launch:
    """The launch of the e2e stack's deployment on this host, from its unit as render/units.py writes it,
    its engine port as the placement sets it."""
    doc = yaml.safe_load(sandbox_env.e2e_stack_file("e2e-tiny-a", gpus=[2, 3]))
    raw = {k.removeprefix("vllm-fleet:"): v for k, v in doc["config"].items()}
    raw["hosts"][0]["runtime"]["vllmVersion"] = read_stack_file(ROOT / "Pulumi.dev.yaml")["hosts"][0]["runtime"][
        "vllmVersion"
    ]
    (rd,) = parse_stack_config(raw).resolved_deployments()
    text = render_unit(rd, "e2e").text.replace(rd.load_path, MODEL)
    argv = exec_start(text)
    assert argv is not None
    launch = split_launch(argv, unit_environment(text), variables={"VLLM_FLEET_BACKEND_PORT": "18001"})
    assert launch is not None
    return launch


def by_hand(argv: list[str], **environment: str) -> Launch:
    launch = split_launch(argv, environment)
    assert launch is not None, argv
    return launch


# The stack's environment, as a hand-made unit of the seeds sets it: without the variables only the
# managed unit adds (HF_HUB_OFFLINE, ...), with its own scratch directory.
SEED_ENV = {
    "HF_HOME": "/shared/huggingface",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "TMPDIR": "/tmp/by-hand",
    "CUDA_VISIBLE_DEVICES": "3",
}
SERVER = [PYTHON, "-m", "vllm.entrypoints.openai.api_server"]
TAIL = ["--gpu-memory-utilization", "0.9", "--enforce-eager", "--host", "127.0.0.1", "--port", "8001"]
# Each the stack's launch as vLLM 0.32 reads it, spelled otherwise.
SAME = {
    "defaults-left-out-and-written-out": by_hand(
        [*SERVER, "--model", MODEL, "--max-model-len", "512", "--dtype", "float32", "--seed", "0", "--kv-cache-dtype", "auto", *TAIL],
        **SEED_ENV,
    ),
    "a_b=c-and-tp-1": by_hand(
        [*SERVER, "--model=" + MODEL, "--max_model_len=512", "--dtype=float32", "-tp", "1", "--gpu_memory_utilization=0.9",
         "--enforce_eager", "--port=8001"],
        **SEED_ENV,
    ),
    "vllm-serve-positional": by_hand(
        ["/opt/vllm-env/bin/vllm", "serve", MODEL, "--max-model-len", "512", "--dtype", "float32", *TAIL], **SEED_ENV
    ),
    "cli-main-serve-through-a-link": by_hand(
        [PYTHON, "-m", "vllm.entrypoints.cli.main", "serve", LINK + "/", "--max-model-len", "512", "--dtype", "float32", *TAIL],
        **SEED_ENV,
    ),
    "HF_HOME-and-TRANSFORMERS_CACHE-spelled-out": by_hand(
        [*SERVER, "--model", MODEL, "--max-model-len", "512", "--dtype", "float32", *TAIL],
        **SEED_ENV, TRANSFORMERS_CACHE="/shared/huggingface/hub", HF_HUB_CACHE="/shared/huggingface/hub",
    ),
}  # fmt: skip
# Each really differs, and the difference is named in one line.
DIFFERENT = {
    "another-max-model-len": (
        by_hand([*SERVER, "--model", MODEL, "--max-model-len", "256", "--dtype", "float32", *TAIL], **SEED_ENV),
        ["--max-model-len is 256 there, 512 in the stack"],
    ),
    "quantization-and-attention-backend": (
        by_hand(
            [*SERVER, "--model", MODEL, "--max-model-len", "512", "--dtype", "float32", "-q", "fp8",
             "--attention-backend", "CPU_ATTN", *TAIL],
            **SEED_ENV,
        ),
        ['--attention-backend is CPU_ATTN there, null (vLLM\'s default) in the stack',
         "--quantization is fp8 there, null (vLLM's default) in the stack"],
    ),
    "vllms-own-default-utilization-and-an-nccl-value": (
        by_hand(
            [*SERVER, "--model", MODEL, "--max-model-len", "512", "--dtype", "float32", "--enforce-eager", "--port", "8001"],
            **SEED_ENV, NCCL_PROTO="LL",
        ),
        ["--gpu-memory-utilization is 0.92 (vLLM's default) there, 0.9 in the stack",
         "its environment has NCCL_PROTO=LL, the stack's no NCCL_PROTO"],
    ),
    "kv-cache-space-read-by-vllm": (
        by_hand([*SERVER, "--model", MODEL, "--max-model-len", "512", "--dtype", "float32", *TAIL],
                **{**SEED_ENV, "VLLM_CPU_KVCACHE_SPACE": "2"}),
        ["vLLM reads VLLM_CPU_KVCACHE_SPACE as 2 there, 1 in the stack"],
    ),
}  # fmt: skip


def read_on_host(launches: list[Launch]) -> tuple[Outcome, float]:
    """The launches as the host reads them (the survey's way: host package on stdin, the venv's Python
    parsing), and the seconds that took."""
    document = json.dumps({"launches": [launch.to_dict() for launch in launches]})
    on_host(f"mkdir -p {MODEL} && ln -sfn {MODEL} {LINK} && cat > {INPUT} <<'EOF'\n{document}\nEOF")
    started = time.monotonic()
    result = run_captured(
        [str(sandbox_env.HOST_SH), "ssh", f"python3 - --python {PYTHON} --input {INPUT} --cache {CACHE}"],
        input=host_bundle.bootstrap_source("host.launch_identity"),
        timeout=300,
        env={**os.environ, "VLLM_FLEET_SANDBOX_NAME": sandbox_env.TEST_HOST},
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    return Outcome.from_dict(json.loads(result.stdout)), took


def test_the_hosts_vllm_reads_each_spelling_of_the_stacks_launch_as_the_same_engine(sandbox: None) -> None:
    on_host(f"rm -rf {CACHE} /tmp/launch-identity", check=False)
    stack = stack_launch()
    launches = [stack, *SAME.values(), *(launch for launch, _ in DIFFERENT.values())]
    first, first_took = read_on_host(launches)
    assert first.vllm.startswith("0.32") and first.fresh == len(launches), first
    wanted, *rest = first.parsed
    same, different = rest[: len(SAME)], rest[len(SAME) :]
    found: dict[str, Any] = {}
    for name, parsed in zip(SAME, same, strict=True):
        found[name] = differences(parsed, wanted, ADOPTION)
    assert found == {name: [] for name in SAME}, found
    for (name, (_, expected)), parsed in zip(DIFFERENT.items(), different, strict=True):
        assert differences(parsed, wanted, ADOPTION) == expected, name
    # Unit against unit nothing is left out: the port, the served names, the GPUs and the compile cache
    # the adoption leaves out are each a restart there.
    assert differences(wanted, wanted, SAME_UNIT) == []
    restart = " | ".join(differences(same[0], wanted, SAME_UNIT))
    for named in (
        "--port is 8001 now, 18001",
        "--served-model-name is null",
        "CUDA_VISIBLE_DEVICES=3",
        "VLLM_CACHE_ROOT",
    ):
        assert named in restart, (named, restart)
    # Read again: every launch from the host's cache, no vLLM imported.
    again, again_took = read_on_host(launches)
    assert again.fresh == 0 and again.took == 0.0 and again.parsed == first.parsed
    assert again.note() is None and first.note() is not None
    sandbox_env.save_results(
        "launch-identity",
        {"launches": len(launches), "first_read_s": round(first_took, 2), "parse_s": first.took,
         "cached_read_s": round(again_took, 2)},
    )  # fmt: skip
    assert again_took < first_took
    on_host(f"rm -rf {CACHE} /tmp/launch-identity", check=False)
