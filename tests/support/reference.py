"""The reference server as the tests render for it: the stack's config with the vLLM release the
reference server's survey reports (tests/fixtures/reference-server/survey.json, what `make preview-prod`
judges against), the way a preview that reaches the server renders it (controller/checks.host_versions)."""

from __future__ import annotations

import json

from controller.checks import host_versions
from host.contract import Survey
from models.config import StackConfig
from tests.support.paths import ROOT

SURVEY_FILE = ROOT / "tests" / "fixtures" / "reference-server" / "survey.json"


def surveys() -> dict[str, Survey]:
    return {name: Survey.from_dict(found) for name, found in json.loads(SURVEY_FILE.read_text()).items()}


def as_surveyed(config: StackConfig) -> StackConfig:
    rendered, errors, _ = host_versions(config, surveys())
    assert errors == [], errors
    return rendered
