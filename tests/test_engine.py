"""The real engine, not mocks: preview the stacks with the binaries `make setup` built."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from pulumi import automation as auto

from sandbox import engine
from sandbox.processes import run_captured
from tests.support.paths import ROOT

pytestmark = pytest.mark.usefixtures("pulumi_engine")

# An operator's own passphrase: production stacks refuse the dev sandbox's.
PROD_ENV = {
    "VLLM_FLEET_OFFLINE": "1",
    "PULUMI_CONFIG_PASSPHRASE": "an-operators-own-passphrase",
    # A local backend per test: the single-operator opt-out of a production stack (docs/state-backend.md).
    "VLLM_FLEET_SINGLE_OPERATOR": "1",
}


def test_engine_versions_and_registered_provider(tmp_path: Path) -> None:
    env = engine.engine_env(tmp_path / "state")

    def run(*args: str) -> str:
        return run_captured(args, env=env, check=True, cwd=ROOT).stdout

    # v3.274.1: the oldest CLI the Go module proxy serves at or above the pinned 3.272.0 SDK.
    assert run("pulumi", "version").strip() == "v3.274.1"
    assert run("pulumi-language-python", "-version").strip() == "v3.259.0"
    assert re.search(r"^command\s+resource\s+1\.2\.1\b", run("pulumi", "plugin", "ls"), re.M)
    # The dynamic-provider helper of the old engine is gone: no step can be a dynamic resource.
    assert not (engine.TOOLS / "bin" / "pulumi-resource-pulumi-python").exists()


def test_pulumi_runs_the_program_under_the_projects_virtualenv(tmp_path: Path) -> None:
    """With only the engine on PATH (no venv), `pulumi about` finds the program's Python and plugins."""
    work = engine.project_copy(tmp_path / "project", {"Pulumi.dev.yaml": (ROOT / "Pulumi.dev.yaml").read_text()})
    env = engine.engine_env(tmp_path / "state")
    (tmp_path / "state").mkdir()
    assert str(ROOT / ".venv") not in env["PATH"]
    subprocess.run(["pulumi", "stack", "init", "dev"], env=env, cwd=work, capture_output=True, check=True)
    about = run_captured(["pulumi", "about", "--stack", "dev"], env=env, cwd=work, check=True).stdout
    assert re.search(r"^resource\s+command\s+1\.2\.1$", about, re.M), about
    assert re.search(r"^language\s+python\s+3\.259\.0$", about, re.M), about
    assert f"executable='{work}/.venv/bin/python'" in about, about
    assert re.search(r"^pulumi-command\s+1\.2\.1$", about, re.M), about  # the SDK, found in .venv
    assert "download" not in about.lower(), about


def test_real_engine_previews_the_dev_stack(tmp_path: Path) -> None:
    work = engine.project_copy(tmp_path / "project", {"Pulumi.dev.yaml": (ROOT / "Pulumi.dev.yaml").read_text()})
    # The program reads the SSH key file while it runs; an offline preview contacts no host.
    (work / ".sandbox" / "ssh").mkdir(parents=True)
    (work / ".sandbox" / "ssh" / "id_ed25519").write_text("placeholder, never used offline\n")
    dev = engine.stack(work, tmp_path / "state", "dev", env={"VLLM_FLEET_OFFLINE": "1"})
    result = dev.preview()
    # The stack, 7 components (host, front door, storage, model, service, access, deploy report) and their
    # steps: 8 (the deploy report reads the serving step's output), and one per group of tools.
    expected = 1 + 7 + 8 + 1  # the tools' package step
    assert result.change_summary.get(auto.OpType.CREATE) == expected, result.change_summary
    dev.workspace.remove_stack("dev")


def test_real_engine_previews_prod_without_contacting_it(tmp_path: Path) -> None:
    work = engine.project_copy(tmp_path / "project", {"Pulumi.prod.yaml": (ROOT / "Pulumi.prod.yaml").read_text()})
    # Judged against the reference server as REFERENCE.md describes it, as `make preview-prod` does.
    env = {**PROD_ENV, "VLLM_FLEET_SURVEY_FILE": str(ROOT / "tests" / "fixtures" / "reference-server" / "survey.json")}
    prod = engine.stack(work, tmp_path / "state", "prod", env=env)
    result = prod.preview(diff=True)
    shown = " ".join(result.stdout.split())
    # The take-over plan (the program's messages, on stderr): the release the server runs decides the
    # rendering, the engine that serves already runs the stack's launch and is adopted in place (no
    # downtime), the ids its clients send stay, every other hand-made unit is named with what happens to it.
    said = " ".join(result.stderr.split())
    assert "host 'gpu-01' runs vLLM 0.11.1.dev0+reference-build" in said
    assert "VLLM_ATTENTION_BACKEND" not in shown and '"--attention-backend"' not in shown
    assert (
        "model ids clients can send on port 8000: today ['/shared/kimi-k2.5-int4']; after this update "
        "['/shared/kimi-k2.5-int4'] (adopted in place); after its next swap ['kimi-k2.5-int4', '/shared/kimi-k2.5-int4']"
        in said
    )
    assert "adopts vllm-kimi-k25-int4.service (PID 4242) in place: it already runs the stack's launch" in said
    assert "the take-over of vllm-kimi-k25-int4.service adopts it in place" in said and "expected downtime 0 s" in said
    assert "takes over vllm-kimi-k25-int4.service" not in said
    # What a restart of Kimi and a swap to MiniMax (kept on disk) would cost, each from the catalog's figure
    # for that model (the server has recorded no start yet), with how each would load and what is unknown.
    unknown = "unknown: the RAM of gpu-01 (MemAvailable), the filesystem of /shared/{}"
    assert (
        "deployment 'primary': a restart of kimi-k2.5-int4: about 33.0 min (from the catalog's reference load of "
        "kimi-k2.5-int4: 30.0 min to 36.0 min on the reference server" in said
    )
    assert unknown.format("kimi-k2.5-int4") in said and unknown.format("minimax-m2.5") in said
    assert (
        "deployment 'primary': a swap to minimax-m2.5 (kept on disk): about 75 s (from the catalog's reference load"
        in said
    )
    assert (
        "loader: --load-format auto (vLLM default), --safetensors-load-strategy lazy (vLLM default): vLLM's default "
        "loader: the host's RAM is unknown, so whether the page cache holds it is too; vLLM's default strategy: the "
        "filesystem of /shared/minimax-m2.5 is unknown" in said
    )
    for unit, state in (
        ("vllm-glm5.service", "inactive, enabled"),
        ("vllm-kimi-k25.service", "inactive, disabled"),
        ("vllm-minimax-m25.service", "inactive, disabled"),
    ):
        assert f"takes over {unit} ({state})" in said, unit
    # Were the stack to pin the preset's attention backend, the take-over could not adopt (the server's vLLM
    # reads the variable the stack adds): it would say why and what the stop-then-start costs, all eight
    # GPUs serving Kimi. The canned survey answers as the server's vLLM would (its `readings`).
    answered = json.loads(Path(env["VLLM_FLEET_SURVEY_FILE"]).read_text())

    def said_with(old: str, new: str, difference: str) -> str:
        """What the preview says of Pulumi.prod.yaml with `old` replaced by `new`, the serving engine's
        launch read against it as differing by `difference`."""
        (work / "Pulumi.prod.yaml").write_text((ROOT / "Pulumi.prod.yaml").read_text().replace(old, new))
        answered["gpu-01"]["readings"]["prod.primary"]["differences"] = [difference]
        (tmp_path / "changed-survey.json").write_text(json.dumps(answered))
        changed = engine.stack(
            work,
            tmp_path / "state",
            "prod",
            env={**env, "VLLM_FLEET_SURVEY_FILE": str(tmp_path / "changed-survey.json")},
        )
        return " ".join(changed.preview(diff=True).stderr.split())

    said = said_with(
        "attentionBackend: null",
        "attentionBackend: TRITON_MLA",
        "its environment has no VLLM_ATTENTION_BACKEND, the stack's VLLM_ATTENTION_BACKEND=TRITON_MLA",
    )
    assert (
        "cannot adopt vllm-kimi-k25-int4.service (PID 4242) in place, so the take-over stops it and starts the "
        "managed unit: its environment has no VLLM_ATTENTION_BACKEND, the stack's VLLM_ATTENTION_BACKEND=TRITON_MLA"
        in said
    )
    assert "will run stop-then-start (hand-made units it replaces stop first); expected downtime: the start of" in said
    # Switched to MiniMax, the swap forecasts MiniMax's own 75 s (not the 14 minutes of one lazy rate for
    # every model, nor Kimi's half hour).
    said = said_with(
        "      model: kimi-k2.5-int4\n",
        "      model: minimax-m2.5\n",
        "its model is /shared/kimi-k2.5-int4, the stack's /shared/minimax-m2.5",
    )
    assert (
        "will run stop-then-start (hand-made units it replaces stop first); expected downtime: the start of "
        "minimax-m2.5, about 75 s (from the catalog's reference load of minimax-m2.5: 75 s on the reference server"
        in said
    ), said
    assert "a swap to kimi-k2.5-int4 (kept on disk): about 33.0 min" in said
    for flag in (
        "--tensor-parallel-size",
        "--tool-call-parser",
        "--reasoning-parser",
        "--trust-remote-code",
        "--max-model-len",
        "--gpu-memory-utilization",
        "--disable-log-requests",
        "--enable-auto-tool-choice",
    ):
        assert f'"{flag}"' in shown, flag
    for variable, value in (
        ("NCCL_P2P_LEVEL", "SYS"),
        ("NCCL_BUFFSIZE", "16777216"),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "1"),
    ):
        assert re.search(rf'{variable}\s*: "{value}"', shown), variable


def refused_preview(stack: auto.Stack) -> str:
    """What the engine says of a preview the program refuses (the preview must fail)."""
    with pytest.raises(auto.CommandError) as caught:
        stack.preview()
    return str(caught.value)


@pytest.mark.parametrize(
    ("broken", "said"),
    [
        pytest.param(
            None,
            [
                "is encrypted with the dev sandbox's passphrase",
                "export PULUMI_CONFIG_PASSPHRASE with a passphrase of your own",
            ],
            id="the-dev-passphrase",
        ),
        pytest.param(
            ("port: 8000", "port: 80"),
            ["vllm-fleet:deployments[0].port: Input should be greater than or equal to 1024 (got 80)"],
            id="a-broken-stack-file",
        ),
    ],
)
def test_production_is_refused_before_any_resource(
    tmp_path: Path, broken: tuple[str, str] | None, said: list[str]
) -> None:
    """Previewed with the dev passphrase (the prod stack's secrets are not its to read), or with a value in
    the stack file that the config refuses: the preview stops naming the fix, with no traceback."""
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    if broken is not None:
        text = text.replace(*broken)
    work = engine.project_copy(tmp_path / "project", {"Pulumi.prod.yaml": text})
    prod = engine.stack(work, tmp_path / "state", "prod", env={"VLLM_FLEET_OFFLINE": "1"})  # the dev passphrase
    message = refused_preview(prod)
    for expected in said:
        assert expected in message
    assert "Traceback" not in message


def test_real_engine_previews_a_fleet_written_with_defaults(tmp_path: Path) -> None:
    """vllm-fleet:defaults reaches the program through the engine's config like any structured key, and
    a bad default stops the preview naming the default's key once. Each host's steps pin its own key from
    the known_hosts file beside the stack file (their preflight records its fingerprint), and a production
    host missing from the file stops the preview naming it."""
    from models.host_keys import fingerprint
    from scripts.fleet_stack import fleet_files
    from scripts.host_keys import host_seed, openssh_public_key

    work = engine.project_copy(tmp_path / "project", fleet_files(3, "fleet3"))
    keys = '{"preview": "0123456789abcdef0123456789abcdef"}'
    fleet = engine.stack(work, tmp_path / "state", "fleet3", secrets={"vllm-fleet:apiKeys": keys}, env=PROD_ENV)
    plan = tmp_path / "plan.json"
    result = fleet.preview(diff=True, plan=str(plan))
    shown = " ".join(result.stdout.split())
    for name in ("gpu-01", "gpu-02", "gpu-03", "kimi-03-serving", "gpu-03-kimi-k2.5-int4-files"):
        assert name in shown, name
    assert re.search(r'NCCL_BUFFSIZE\s*: "16777216"', shown)
    assert "of the engine's limit" not in shown  # a small config: no warning
    # The preview's plan holds each step's inputs whole (its diff shortens scripts).
    steps = {
        urn.rsplit("::", 1)[-1]: p["goal"]["inputDiff"]["adds"]
        for urn, p in json.loads(plan.read_text())["resourcePlans"].items()
        if "adds" in p["goal"].get("inputDiff", {})
    }
    for host in ("gpu-01", "gpu-02", "gpu-03"):
        assert (
            f"PINNED_HOST_KEY={fingerprint(openssh_public_key(host_seed(host)))}"
            in steps[f"{host}-preflight"]["create"]
        )
    known_hosts = work / "known_hosts.fleet3"
    complete = known_hosts.read_text()
    known_hosts.write_text("".join(line + "\n" for line in complete.splitlines() if not line.startswith("10.40.0.12 ")))
    refused = refused_preview(fleet)
    assert "vllm-fleet:hosts[gpu-02].hostKey: host 'gpu-02' has no SSH host key" in refused
    assert "vllm-fleet:knownHostsFile (known_hosts.fleet3) has no line for 10.40.0.12" in refused
    known_hosts.write_text(complete)
    (work / "Pulumi.fleet3.yaml").write_text(
        (work / "Pulumi.fleet3.yaml").read_text().replace("memoryGib: 96", "memoryGib: -96")
    )
    assert (
        "vllm-fleet:defaults.host.gpus.memoryGib: Input should be greater than 0 (got -96) "
        "(inherited by hosts[0] 'gpu-01' and 2 more)" in refused_preview(fleet)
    )


def test_real_engine_warns_when_the_config_nears_its_limit(tmp_path: Path) -> None:
    """The engine hands the program its config in one environment variable, capped at 128 KiB by Linux: a
    preview past 80% of it warns with the hosts of this shape that fit (past 100%, the engine itself fails
    before the program runs: 'argument list too long')."""
    from scripts.fleet_stack import fleet_files

    files = fleet_files(3, "fleet3")
    # A stack past 80% with three hosts: a long note on a model stands in for a thousand hosts' entries.
    files["Pulumi.fleet3.yaml"] = files["Pulumi.fleet3.yaml"].replace(
        "      preset: kimi-k2.5-int4\n", "      preset: kimi-k2.5-int4\n      notes: " + "n" * 106_000 + "\n", 1
    )
    work = engine.project_copy(tmp_path / "project", files)
    keys = '{"preview": "0123456789abcdef0123456789abcdef"}'
    fleet = engine.stack(work, tmp_path / "state", "fleet3", secrets={"vllm-fleet:apiKeys": keys}, env=PROD_ENV)
    shown = " ".join(fleet.preview().stdout.split())
    assert re.search(r"the stack's config is 10\d KiB, 8\d% of the engine's limit of 128 KiB", shown), shown[-2000:]
    assert re.search(r"one stack holds about \d+ hosts of this shape \(3 now\)", shown)
    assert "Split the fleet into stacks by site or rack, one PostgreSQL backend for all of them" in shown
