"""The LoRA adapters a deployment's engine serves, loaded at runtime (no restart); the `adapters` tool
(host/tools/adapters.py) runs `apply`.

The deployment's adapters step runs `adapters apply` with the wanted set: it checks every adapter's files
(adapter_config.json: a LoRA, of a base the stack names, within the engine's --max-lora-rank) before it
changes anything, writes the set to the deployment's `adapters.json`, and brings the serving engine to it
through vLLM's runtime endpoints on the engine's loopback port (/v1/load_lora_adapter,
/v1/unload_lora_adapter; the front door never proxies them): it unloads what left or changed revision,
loads what came or changed, and checks that each answers a one-token completion. The engine keeps
serving its model throughout.

Every engine of the deployment loads the same file whenever it starts (boot, crash restart, swap,
blue/green's new engine): wait-ready calls `load_for_engine` before the unit counts as started, so the
adapters survive restarts. An engine loads only the adapters that fit the model it serves. Standard
library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from host.contract import ADAPTERS_FILE, ActiveRecord, Adapter, AdapterState, adapters_json
from host.swap_files import write_file


def read_wanted(path: Path) -> list[Adapter]:
    """The adapters file; none when it does not exist (a deployment whose adapters step has not run)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    return [Adapter.from_dict(entry) for entry in data.get("adapters", [])]


def write_wanted(path: Path, adapters: list[Adapter]) -> None:
    write_file(path, adapters_json(adapters) + "\n", make_parent=False)


def file_errors(adapter: Adapter, max_rank: int) -> list[str]:
    """What is wrong with an adapter's files for this engine, each naming the config key to fix."""
    key = adapter.config_key or adapter.name
    config_path = Path(adapter.path) / "adapter_config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [f"{key}: {config_path} is not a readable adapter config ({error}); is {adapter.repo} a LoRA adapter?"]
    errors: list[str] = []
    if config.get("peft_type") != "LORA":
        errors.append(f"{key}: {adapter.repo} is a {config.get('peft_type')!r} adapter; vLLM serves LORA ones")
    rank = config.get("r")
    if not isinstance(rank, int) or rank > max_rank:
        errors.append(
            f"{key}: {adapter.repo} has rank {rank}, above the engine's maxLoraRank {max_rank}; raise "
            "serving.lora.maxLoraRank (one restart) or use an adapter of a lower rank"
        )
    base = config.get("base_model_name_or_path")
    if adapter.base_repos and base not in adapter.base_repos:
        errors.append(
            f"{key}: {adapter.repo}'s adapter_config.json names {base!r} as its base, not one of the models its "
            f"bases list ({', '.join(adapter.base_repos)}); fix the adapter's bases"
        )
    if not any(Path(adapter.path).glob("adapter_model.*")):
        errors.append(f"{key}: {adapter.path} holds no adapter_model.safetensors (or .bin)")
    return errors


def engine_request(url: str, body: dict[str, object] | None, timeout: float) -> tuple[int, str]:
    """One request to an engine on loopback (with its API key when the unit sets one): (status, body)."""
    # Imported here: urllib.request brings http.client, email and ssl (~25 ms), and the survey, which
    # imports this module in every swap's preview and transaction, needs it only for a deployment with adapters.
    import urllib.error
    import urllib.request

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


@dataclass(frozen=True)
class Engine:
    """One running vLLM engine, reached on its loopback port."""

    base: str
    fetch: Fetch = engine_request

    def loaded(self) -> set[str]:
        """The names of the adapters it serves now (vLLM lists them in /v1/models with a parent, the model
        they apply to)."""
        status, body = self.fetch(f"{self.base}/v1/models", None, 10)
        if status != 200:
            raise OSError(f"{self.base}/v1/models answered {status}")
        return {m["id"] for m in json.loads(body).get("data", []) if m.get("parent")}

    def load(self, adapter: Adapter) -> None:
        status, body = self.fetch(
            f"{self.base}/v1/load_lora_adapter", {"lora_name": adapter.name, "lora_path": adapter.path}, 120
        )
        if status != 200:
            raise OSError(f"loading adapter {adapter.name} from {adapter.path} answered {status}: {body[:300]}")

    def unload(self, name: str) -> None:
        status, body = self.fetch(f"{self.base}/v1/unload_lora_adapter", {"lora_name": name}, 60)
        if status != 200:
            raise OSError(f"unloading adapter {name} answered {status}: {body[:300]}")

    def answers(self, name: str) -> str | None:
        """None when a one-token completion under `name` succeeds, else what went wrong."""
        body_out = {"model": name, "prompt": "ping", "max_tokens": 1}
        status, body = self.fetch(f"{self.base}/v1/completions", body_out, 60)
        if status == 200 and json.loads(body).get("choices"):
            return None
        return f"a one-token completion as {name} answered {status}: {body[:200]}"


def reconcile(engine: Engine, wanted: list[Adapter], changed: set[str], log: Callable[[str], None]) -> None:
    """Bring the engine to `wanted`: unload what is not wanted or changed (a new revision), load what is
    missing, then check each answers. Raises OSError on the first failure."""
    loaded = engine.loaded()
    names = {a.name for a in wanted}
    for name in sorted(loaded):
        if name not in names or name in changed:
            engine.unload(name)
            log(f"unloaded {name}" + (" (a new revision follows)" if name in names else ""))
    for adapter in wanted:
        if adapter.name not in loaded or adapter.name in changed:
            engine.load(adapter)
            log(f"loaded {adapter.name} ({adapter.repo}@{adapter.revision[:12]}) from {adapter.path}")
    for adapter in wanted:
        problem = engine.answers(adapter.name)
        if problem is not None:
            raise OSError(problem)


def load_for_engine(engine: Engine, adapters_file: Path, model_path: str, log: Callable[[str], None]) -> bool:
    """At an engine's start (wait-ready): load the deployment's adapters that fit its model."""
    listed = read_wanted(adapters_file)
    wanted = [a for a in listed if a.fits(model_path)]
    skipped = [a.name for a in listed if not a.fits(model_path)]
    if skipped:
        log(f"adapters {', '.join(skipped)} do not fit {model_path}: not loaded")
    try:
        reconcile(engine, wanted, set(), log)
    except (OSError, ValueError) as error:
        log(f"adapters not ready: {error}")
        return False
    if wanted:
        log(f"adapters ready: {', '.join(a.name for a in wanted)}")
    return True


def serving_engine(state_dir: Path) -> Engine | None:
    """The deployment's serving engine, from its active record; None when nothing serves (the adapters
    load when it starts)."""
    try:
        record = ActiveRecord.parse((state_dir / "active").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if record is None:
        return None
    port = record.backend_port if record.backend_port is not None else record.port
    return Engine(f"http://127.0.0.1:{port}")


def adapter_state(state_dir: Path) -> AdapterState | None:
    """What the survey and `make status` report of a deployment's adapters: the wanted ones (name ->
    revision), what its serving engine has loaded (None when it does not answer), how many drift repairs
    its adapters step made, and the drift itself. None for a deployment without an adapters file."""
    path = state_dir / ADAPTERS_FILE
    if not path.exists():
        return None
    wanted = {a.name: a.revision for a in read_wanted(path)}
    engine = serving_engine(state_dir)
    loaded: list[str] | None = None
    if engine is not None:
        try:
            loaded = sorted(engine.loaded())
        except (OSError, ValueError):
            loaded = None
    try:
        repairs = int((state_dir / "adapter-repairs").read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        repairs = 0
    drift = []
    if loaded is not None:
        drift += [f"adapter {name} is loaded but not wanted (loaded by hand?)" for name in loaded if name not in wanted]
        drift += [f"adapter {name} is wanted but not loaded" for name in wanted if name not in loaded]
    return AdapterState(wanted, None if loaded is None else tuple(loaded), repairs, tuple(drift))


def apply(state_dir: Path, wanted: list[Adapter], max_rank: int, log: Callable[[str], None]) -> int:
    errors = [e for adapter in wanted for e in file_errors(adapter, max_rank)]
    if errors:
        for error in errors:
            log(f"refused, nothing changed: {error}")
        return 1
    path = state_dir / ADAPTERS_FILE
    before = {a.name: a for a in read_wanted(path)}
    changed = {a.name for a in wanted if a.name in before and before[a.name].revision != a.revision}
    write_wanted(path, wanted)
    names = {a.name for a in wanted}
    added = [a.name for a in wanted if a.name not in before]
    removed = [name for name in before if name not in names]
    log(
        f"adapters: {len(wanted)} wanted (added {added or 'none'}, new revision {sorted(changed) or 'none'}, "
        f"removed {removed or 'none'}); the engine keeps serving"
    )
    # The step runs after the deployment's swap, so the engine serves the stack's model, which every
    # listed adapter fits (the preview refuses one that does not).
    engine = serving_engine(state_dir)
    if engine is None:
        log("no engine serves this deployment now: it loads them when it starts")
        return 0
    try:
        reconcile(engine, wanted, changed, log)
    except (OSError, ValueError) as error:
        log(f"failed: {error}")
        return 1
    log(f"serving adapters: {', '.join(a.name for a in wanted) or 'none'}")
    return 0
