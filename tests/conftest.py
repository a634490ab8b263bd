"""Shared fixtures: paths of the repo and the recorded nvidia-smi output, and stack-config builders."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import pytest

from models.loader import read_stack_file

ROOT = Path(__file__).resolve().parent.parent
# CI lays shared/ beside the checkout; a developer's checkout has it there too.
FIXTURES = Path(os.environ.get("VLLM_FLEET_SHARED", ROOT.parent / "shared")) / "fixtures" / "nvidia-smi"


@pytest.fixture
def prod_raw() -> dict[str, Any]:
    """The real Pulumi.prod.yaml values, namespace stripped, as a mutable copy."""
    return copy.deepcopy(read_stack_file(ROOT / "Pulumi.prod.yaml"))


@pytest.fixture
def dev_raw() -> dict[str, Any]:
    return copy.deepcopy(read_stack_file(ROOT / "Pulumi.dev.yaml"))
