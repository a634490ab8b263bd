"""The kept validated config (controller/validated_config.py): the same config a validation gives, validated
again whenever anything it came from changed, never an invalid one kept, and no pydantic on a run that reuses it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from controller import validated_config
from models.config import StackConfig
from models.loader import ConfigError, parse_stack_config, read_stack_file

ROOT = Path(__file__).resolve().parent.parent


class CountingParse:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, raw: Mapping[str, Any]) -> StackConfig:
        self.calls += 1
        return parse_stack_config(raw)


def dev_raw() -> dict[str, Any]:
    return read_stack_file(ROOT / "Pulumi.dev.yaml")


def test_a_kept_config_is_the_validated_one_and_is_not_validated_again(tmp_path: Path) -> None:
    parse = CountingParse()
    first = validated_config.load("dev", dev_raw(), tmp_path, b"code", parse)
    again = validated_config.load("dev", dev_raw(), tmp_path, b"code", parse)
    assert parse.calls == 1
    assert again == first == parse_stack_config(dev_raw())
    assert again.resolved_deployments() == first.resolved_deployments()


def test_a_change_of_the_values_or_of_the_code_validates_again(tmp_path: Path) -> None:
    parse = CountingParse()
    validated_config.load("dev", dev_raw(), tmp_path, b"code", parse)
    changed = dev_raw()
    changed["deployments"][0]["drainSeconds"] = 7
    assert validated_config.load("dev", changed, tmp_path, b"code", parse).deployments[0].drain_seconds == 7
    assert parse.calls == 2
    validated_config.load("dev", changed, tmp_path, b"other code", parse)
    assert parse.calls == 3
    # Each stack keeps its own.
    validated_config.load("other", changed, tmp_path, b"other code", parse)
    validated_config.load("dev", changed, tmp_path, b"other code", parse)
    assert parse.calls == 4


def test_the_code_key_covers_every_file_of_the_models(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "config.py").write_text("A = 1\n")
    (models / "catalog.yaml").write_text("a: {}\n")
    before = validated_config.validation_inputs(models)
    (models / "catalog.yaml").write_text("a: {repo: x/y}\n")
    after_catalog = validated_config.validation_inputs(models)
    (models / "rules.py").write_text("\n")
    after_rules = validated_config.validation_inputs(models)
    (models / "presets").mkdir()
    (models / "presets" / "glm.json").write_text("{}")
    assert len({before, after_catalog, after_rules, validated_config.validation_inputs(models)}) == 4


def test_an_invalid_config_is_refused_every_time_and_never_kept(tmp_path: Path) -> None:
    raw = dev_raw()
    raw["deployments"][0]["port"] = 80
    for _ in range(2):
        with pytest.raises(ConfigError, match="port"):
            validated_config.load("dev", raw, tmp_path, b"code")
    assert not list(tmp_path.iterdir())


def test_an_unreadable_file_is_a_miss(tmp_path: Path) -> None:
    (tmp_path / "dev.pickle").write_bytes(b"not a pickle")
    parse = CountingParse()
    assert validated_config.load("dev", dev_raw(), tmp_path, b"code", parse) == parse_stack_config(dev_raw())
    assert parse.calls == 1
    validated_config.load("dev", dev_raw(), tmp_path, b"code", parse)
    assert parse.calls == 1  # the unreadable file was replaced


def test_a_run_that_reuses_the_kept_config_imports_no_pydantic(tmp_path: Path) -> None:
    """The point of keeping it: a fresh interpreter, as each run of the program is, loads the kept config
    and builds the deployments without pydantic's import or any validator's build."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from pathlib import Path\n"
        "from controller import validated_config\n"
        "from models.loader import read_stack_file\n"
        f"raw = read_stack_file(Path({str(ROOT / 'Pulumi.dev.yaml')!r}))\n"
        f"config = validated_config.load('dev', raw, Path({str(tmp_path)!r}))\n"
        "names = [rd.unit_name for rd in config.resolved_deployments()]\n"
        "print(json.dumps({'pydantic': 'pydantic' in sys.modules, 'units': names}))\n"
    )
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)
        for _ in range(2)
    ]
    assert runs[0]["pydantic"] is True  # the first run validated
    assert runs[1] == {"pydantic": False, "units": runs[0]["units"]}
