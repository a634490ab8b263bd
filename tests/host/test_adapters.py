"""host/adapters.py: the adapters step's checks and its reconciliation of a running engine, against a
stand-in of vLLM's runtime LoRA endpoints (the real engine runs them in tests/test_adapters.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from host import adapters
from host.adapters import Engine
from host.contract import Adapter


class FakeVllm:
    """vLLM's /v1/models, load/unload endpoints and completions, for one served model."""

    def __init__(self, loaded: dict[str, str] | None = None, broken: frozenset[str] = frozenset()) -> None:
        self.loaded = dict(loaded or {})
        self.broken = broken
        self.calls: list[str] = []

    def fetch(self, url: str, body: dict[str, object] | None, timeout: float) -> tuple[int, str]:
        path = url.removeprefix("http://127.0.0.1:18001/")
        self.calls.append(f"{path} {json.dumps(body, sort_keys=True) if body else ''}".strip())
        if path == "v1/models":
            data = [{"id": "chat", "parent": None}] + [
                {"id": name, "root": root, "parent": "chat"} for name, root in self.loaded.items()
            ]
            return 200, json.dumps({"data": data})
        assert body is not None
        if path == "v1/load_lora_adapter":
            name = str(body["lora_name"])
            if name in self.loaded:
                return 400, "already loaded"
            self.loaded[name] = str(body["lora_path"])
            return 200, "ok"
        if path == "v1/unload_lora_adapter":
            return (200, "ok") if self.loaded.pop(str(body["lora_name"]), None) else (404, "not found")
        if path == "v1/completions":
            model = str(body["model"])
            if model in self.broken or (model != "chat" and model not in self.loaded):
                return 404, "no such model"
            return 200, json.dumps({"choices": [{"text": "x"}]})
        return 404, "?"


def adapter_dir(root: Path, name: str, base: str = "acme/tiny-chat-a", rank: int = 8, peft: str = "LORA") -> Path:
    path = root / f"adapter-{name}"
    path.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": peft, "r": rank, "base_model_name_or_path": base}
    (path / "adapter_config.json").write_text(json.dumps(config))
    (path / "adapter_model.safetensors").write_bytes(b"\0" * 8)
    return path


def wanted(root: Path, name: str, revision: str = "r1", **files: Any) -> Adapter:
    path = adapter_dir(root, name, **files)
    return Adapter(
        name=name,
        path=str(path),
        repo=f"acme/{name}",
        revision=revision,
        bases=("tiny-chat-a",),
        base_repos=("acme/tiny-chat-a",),
        config_key=f"vllm-fleet:adapters.{name}",
    )


def state(tmp_path: Path, port: int = 18001) -> Path:
    directory = tmp_path / "state"
    directory.mkdir(exist_ok=True)
    (directory / "active").write_text(f"UNIT=vllm-x.service\nSERVED=chat\nPORT=8001\nGPUS=0\nBACKEND_PORT={port}\n")
    return directory


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> FakeVllm:
    fake = FakeVllm()
    monkeypatch.setattr(adapters, "serving_engine", lambda _state: Engine("http://127.0.0.1:18001", fake.fetch))
    return fake


def test_apply_adds_updates_and_removes_through_the_runtime_endpoints(tmp_path: Path, engine: FakeVllm) -> None:
    directory, lines = state(tmp_path), list[str]()
    one, two = wanted(tmp_path, "one"), wanted(tmp_path, "two")
    assert adapters.apply(directory, [one, two], 8, lines.append) == 0
    assert sorted(engine.loaded) == ["one", "two"]
    assert [a.name for a in adapters.read_wanted(directory / "adapters.json")] == ["one", "two"]
    # A new revision of one: unloaded and loaded again; two untouched; three added.
    engine.calls.clear()
    three = wanted(tmp_path, "three")
    assert adapters.apply(directory, [wanted(tmp_path, "one", "r2"), two, three], 8, lines.append) == 0
    changes = [c.split()[0] + " " + json.loads(c.split(" ", 1)[1])["lora_name"] for c in engine.calls if "lora" in c]
    assert changes == ["v1/unload_lora_adapter one", "v1/load_lora_adapter one", "v1/load_lora_adapter three"]
    assert "new revision ['one']" in "\n".join(lines)
    # Removing: unloaded, and the file the engine's next start reads lists only the rest.
    assert adapters.apply(directory, [three], 8, lines.append) == 0
    assert sorted(engine.loaded) == ["three"]
    assert [a.name for a in adapters.read_wanted(directory / "adapters.json")] == ["three"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"rank": 16}, "has rank 16, above the engine's maxLoraRank 8"),
        ({"peft": "IA3"}, "is a 'IA3' adapter; vLLM serves LORA ones"),
        ({"base": "acme/other"}, "names 'acme/other' as its base"),
    ],
)
def test_bad_files_are_refused_before_anything_changes(
    tmp_path: Path, engine: FakeVllm, files: dict[str, Any], message: str
) -> None:
    directory, lines = state(tmp_path), list[str]()
    good = wanted(tmp_path, "good")
    assert adapters.apply(directory, [good], 8, lines.append) == 0
    engine.calls.clear()
    assert adapters.apply(directory, [good, wanted(tmp_path, "bad", **files)], 8, lines.append) == 1
    assert any(message in line and "vllm-fleet:adapters.bad" in line for line in lines), lines
    assert engine.calls == [] and sorted(engine.loaded) == ["good"]
    assert [a.name for a in adapters.read_wanted(directory / "adapters.json")] == ["good"]


def test_an_adapter_that_does_not_answer_fails_the_step(tmp_path: Path, engine: FakeVllm) -> None:
    engine.broken = frozenset({"mute"})
    lines: list[str] = []
    assert adapters.apply(state(tmp_path), [wanted(tmp_path, "mute")], 8, lines.append) == 1
    assert "a one-token completion as mute answered 404" in lines[-1]


def test_with_nothing_serving_the_set_is_recorded_for_the_next_start(tmp_path: Path) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    lines: list[str] = []
    assert adapters.apply(directory, [wanted(tmp_path, "one")], 8, lines.append) == 0
    assert "loads them when it starts" in lines[-1]
    assert [a.name for a in adapters.read_wanted(directory / "adapters.json")] == ["one"]


def test_an_engine_starting_loads_only_what_fits_its_model(tmp_path: Path) -> None:
    directory, fake = state(tmp_path), FakeVllm()
    fits = wanted(tmp_path, "fits")
    other = Adapter("other", str(adapter_dir(tmp_path, "other")), "acme/o", "r1", ("tiny-chat-b",))
    adapters.write_wanted(directory / "adapters.json", [fits, other])
    lines: list[str] = []
    engine = Engine("http://127.0.0.1:18001", fake.fetch)
    assert adapters.load_for_engine(engine, directory / "adapters.json", "/srv/staging/tiny-chat-a", lines.append)
    assert sorted(fake.loaded) == ["fits"]
    assert "adapters other do not fit /srv/staging/tiny-chat-a: not loaded" in lines
    fake.broken = frozenset({"fits"})
    fake.loaded.clear()
    assert not adapters.load_for_engine(engine, directory / "adapters.json", "/shared/tiny-chat-a", lines.append)


def test_survey_reports_drift_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = state(tmp_path)
    assert adapters.adapter_state(directory) is None  # no adapters file: a deployment without adapters
    adapters.write_wanted(directory / "adapters.json", [wanted(tmp_path, "one")])
    fake = FakeVllm({"by-hand": "/tmp/x"})
    monkeypatch.setattr(adapters, "serving_engine", lambda _state: Engine("http://127.0.0.1:18001", fake.fetch))
    entry = adapters.adapter_state(directory)
    assert entry is not None and entry.wanted == {"one": "r1"} and entry.loaded == ("by-hand",)
    assert entry.drift == (
        "adapter by-hand is loaded but not wanted (loaded by hand?)",
        "adapter one is wanted but not loaded",
    )
