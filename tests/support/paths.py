"""Paths of the repository and of the recorded nvidia-smi output."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Real nvidia-smi output recorded on an H200 (see its README): part of the repository, so a user's
# clone tests the guard on it.
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia-smi"
