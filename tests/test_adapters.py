"""LoRA adapters as resources, end to end on the sandbox: added, updated to another revision and removed
as diffs that restart no engine, loaded again after a reboot with no `pulumi up`, kept across a blue/green
model swap, repaired after drift, never loadable through the front door.

A client sends a one-token completion every 100 ms to the base model through the front door (the real
OpenAI client, no retries) throughout; once the adapter exists a second one sends to the adapter. The
adapters (sandbox/tiny_adapters.py) make the tiny models start their sentence later, so the answer shows
which adapter, which revision and which base answered. The tests run in file order and share one stack;
the clients' figures per phase go to .run/adapter-phases.json."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from sandbox import sandbox_env
from sandbox.hf_mirror import RepoStore
from sandbox.sandbox_env import on_host
from sandbox.tiny_adapters import A_ONLY_REPO, TERSE, TERSE_REPO
from scripts import status
from scripts.api_client import client
from scripts.downtime_probe import DowntimeProbe
from tests.support.paths import ROOT
from tests.support.sandbox_stack import SandboxStack, module_state, start_without_failures

STACK = "lora"
PORT = sandbox_env.E2E_PORT
ENDPOINT = sandbox_env.api_url(PORT)
SERVED = "lt-chat"
MODELS = sandbox_env.tiny_models("lt", keep=True)
LORA = {"maxLoras": 2, "maxLoraRank": 8}
MIRROR_REPOS = ROOT / ".cache" / "mirror" / "repos"


def revision(label: str) -> str:
    """The commit sha the mirror serves the terse adapter's revision `label` under (pinned, as in production)."""
    return RepoStore(MIRROR_REPOS).revisions(TERSE_REPO)[label]


def adapters(terse: str | None, a_only: bool = False) -> dict[str, Any]:
    entries: dict[str, Any] = {}
    if terse is not None:
        entries["terse"] = {"repo": TERSE_REPO, "revision": revision(terse), "bases": ["lt-tiny-a", "lt-tiny-b"]}
    if a_only:
        entries["a-only"] = {"repo": A_ONLY_REPO, "bases": ["lt-tiny-a"]}
    return entries


class Adapters(SandboxStack):
    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp, STACK)
        self.base = DowntimeProbe(ENDPOINT, SERVED, timeout=10.0)
        self.adapter = DowntimeProbe(ENDPOINT, "terse", timeout=10.0)
        self.phases = sandbox_env.PhaseResults("adapter-phases")

    def tear_down(self) -> None:
        self.base.stop()
        self.adapter.stop()
        self.destroy(self.configure("lt-tiny-a", None), continue_on_error=True)

    def configure(self, model: str, terse: str | None, a_only: bool = False) -> auto.Stack:
        doc = yaml.safe_load(sandbox_env.e2e_stack_file(model, gpus=[2, 3], port=PORT, extra_models=MODELS))
        config = doc["config"]
        for spec in config["vllm-fleet:models"].values():
            spec["serving"] = {"lora": LORA}
        config["vllm-fleet:adapters"] = adapters(terse, a_only)
        listed = (["terse"] if terse is not None else []) + (["a-only"] if a_only else [])
        config["vllm-fleet:deployments"][0].update(servedModelName=SERVED, adapters=listed)
        self.stack = self.select(doc)
        return self.stack

    def up(self, phase: str, model: str, terse: str | None) -> tuple[auto.UpResult, dict[str, Any]]:
        """`pulumi up` with the clients running: what each saw during it."""
        self.configure(model, terse)
        self.output.clear()
        start = time.monotonic()
        result = self.stack.up(on_output=self.output.append)
        time.sleep(1)
        end = time.monotonic()
        return result, self.phases.record(
            phase, {"base": self.base.report(start, end), "adapter": self.adapter.report(start, end)}
        )

    def change_without_restart(self, phase: str, model: str, terse: str | None, previewed: str) -> dict[str, Any]:
        """Preview (which must say `previewed` and "no restart") and apply an adapter change: it succeeds,
        the engine's MainPID stays, and the base model's client saw no failed request."""
        unit = f"vllm-{model}.service"
        pid = main_pid(unit)
        preview = self.configure(model, terse).preview()
        assert previewed in preview.stdout and "no restart" in preview.stdout, preview.stdout[-3000:]
        result, seen = self.up(phase, model, terse)
        assert result.summary.result == "succeeded", self.log()[-3000:]
        # Only downloads and the adapters step ran: the unit and the serving step stayed as they were.
        assert set(result.summary.resource_changes or {}) <= {"same", "create", "update", "delete"}, result.summary
        assert main_pid(unit) == pid
        assert seen["base"]["requests"] > 20 and seen["base"]["failed"] == 0, repr(seen)
        return seen


def answer(model: str) -> str:
    chat = client(ENDPOINT, None, None, max_retries=0, timeout=30)
    reply = chat.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Who speaks?"}], max_tokens=20
    )
    return (reply.choices[0].message.content or "").strip()


def status_of(model: str) -> int:
    try:
        answer(model)
    except Exception as error:  # the client raises NotFoundError for vLLM's 404
        return int(getattr(error, "status_code", 0) or 0)
    return 200


def main_pid(unit: str) -> str:
    return on_host(f"systemctl show -p MainPID --value {unit}").strip()


lora = module_state(Adapters)


def test_engine_launched_for_lora_serves_its_model(lora: Adapters) -> None:
    result = lora.configure("lt-tiny-a", None).up(on_output=lora.output.append)
    assert result.summary.result == "succeeded", lora.log()[-3000:]
    unit = on_host("cat /etc/systemd/system/vllm-lt-tiny-a.service")
    assert "--enable-lora --max-loras 2 --max-lora-rank 8" in unit
    assert "--adapters /var/lib/vllm-fleet/deployments/lora.chat/adapters.json" in unit
    assert answer(SERVED) == "Hello fleet! This is tiny-chat-a speaking from the sandbox."
    start_without_failures(lora.base, 2)


def test_adding_an_adapter_restarts_nothing(lora: Adapters) -> None:
    lora.change_without_restart("add", "lt-tiny-a", "main", "LoRA adapters: adds terse (acme/tiny-chat-terse@")
    assert answer("terse") == TERSE["main"].sentence("acme/tiny-chat-a")
    assert answer(SERVED) == "Hello fleet! This is tiny-chat-a speaking from the sandbox."
    lora.adapter.start()


def test_updating_it_to_another_revision_restarts_nothing(lora: Adapters) -> None:
    lora.change_without_restart("update", "lt-tiny-a", "shorter", "LoRA adapters: updates terse")
    steps = [line for line in lora.log().splitlines() if "adapter" in line]
    assert answer("terse") == TERSE["shorter"].sentence("acme/tiny-chat-a"), "\n".join(steps)


def test_front_door_never_passes_the_load_endpoints(lora: Adapters) -> None:
    for path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"):
        for headers in ({}, {"Authorization": "Bearer any-key"}):
            request = urllib.request.Request(
                ENDPOINT.removesuffix("/v1") + path,
                data=json.dumps({"lora_name": "x", "lora_path": "/etc"}).encode(),
                headers={"Content-Type": "application/json", **headers},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 404, (path, headers)


def test_drift_is_reported_and_repaired(lora: Adapters) -> None:
    deployments = lora.stack.outputs()["deployments"].value
    found = status.collect(STACK, deployments, sandbox_env.SSH_KEY.read_text())
    assert found["chat"]["facts"]["adapters"]["loaded"] == ["terse"], found["chat"]["facts"]
    assert found["chat"]["drift"] == [], found["chat"]["drift"]
    backend = on_host("sed -n 's/^VLLM_FLEET_BACKEND_PORT=//p' /etc/vllm-fleet/vllm-lt-tiny-a.placement.env").strip()
    on_host(
        f"curl -sf 127.0.0.1:{backend}/v1/unload_lora_adapter -H 'Content-Type: application/json' "
        '-d \'{"lora_name": "terse"}\''
    )
    assert status_of("terse") == 404
    # make status lists what the engine loaded and the drift, from the survey the preview reads too.
    found = status.collect(STACK, lora.stack.outputs()["deployments"].value, sandbox_env.SSH_KEY.read_text())
    print(status.show("chat", found["chat"]))
    assert found["chat"]["facts"]["adapters"]["loaded"] == [], found["chat"]["facts"]
    assert "adapter terse is wanted but not loaded" in found["chat"]["drift"], found["chat"]["drift"]
    preview = lora.configure("lt-tiny-a", "shorter").preview()
    assert "adapter terse is wanted but not loaded" in preview.stdout, preview.stdout[-3000:]
    result, seen = lora.up("repair", "lt-tiny-a", "shorter")
    assert result.summary.result == "succeeded", lora.log()[-3000:]
    assert seen["base"]["failed"] == 0, repr(seen)
    assert answer("terse") == TERSE["shorter"].sentence("acme/tiny-chat-a")


def test_reboot_brings_the_adapter_back_with_no_pulumi_up(lora: Adapters) -> None:
    def adapter_answers() -> bool:
        try:
            return answer("terse") == TERSE["shorter"].sentence("acme/tiny-chat-a")
        except Exception:
            return False

    lora.base.stop()
    lora.adapter.stop()
    seconds = sandbox_env.reboot_until(adapter_answers, timeout=300, every=2)
    assert seconds is not None, on_host("journalctl -u vllm-lt-tiny-a.service -n 40 --no-pager", check=False)
    lora.phases.record("reboot", {"adapter_answers_after_s": round(seconds, 1)})
    lora.base = DowntimeProbe(ENDPOINT, SERVED, timeout=10.0).start()
    lora.adapter = DowntimeProbe(ENDPOINT, "terse", timeout=10.0).start()


def test_blue_green_swap_keeps_the_adapters_the_new_model_fits(lora: Adapters) -> None:
    with pytest.raises(auto.CommandError) as refused:
        lora.configure("lt-tiny-b", "shorter", a_only=True).preview()
    assert "adapter 'a-only' is a LoRA adapter of lt-tiny-a" in str(refused.value), str(refused.value)[-3000:]
    result, seen = lora.up("blue_green", "lt-tiny-b", "shorter")
    assert result.summary.result == "succeeded", lora.log()[-3000:]
    assert "swap mode: blue-green" in lora.log()
    assert seen["base"]["requests"] > 50 and seen["base"]["failed"] == 0, repr(seen)
    assert answer("terse") == TERSE["shorter"].sentence("acme/tiny-chat-b")
    # The new engine loaded it as it started (wait-ready), before it took requests.
    journal = on_host("journalctl -u vllm-lt-tiny-b.service -b --no-pager -o cat", check=False)
    assert "loaded terse" in journal, journal[-2000:]


def test_removing_it_restarts_nothing_and_its_name_is_gone(lora: Adapters) -> None:
    lora.adapter.stop()
    lora.change_without_restart("remove", "lt-tiny-b", None, "LoRA adapters: removes terse")
    assert status_of("terse") == 404
    assert answer(SERVED) == "Greetings! tiny-chat-b answers now: the swap worked."
