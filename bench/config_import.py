"""What the stack config costs a run of the program, in a fresh interpreter set up as `__main__.py` sets itself up
before its imports (the collector off, no pydantic plugins, the generated-code cache installed, `import pulumi`
done), so the figures are the ones the program pays. Run by `make bench ARGS=noop`; prints JSON (ms):

- `models`: importing the config models and their loader, which every run does;
- `validation`: validating the dev stack's values, which a run does only when they or models/ changed since
  the last run: pydantic's import, the build of the config's validator and the validation itself;
- `kept`: reading the config that validation kept (controller/validated_config.py), which every other run does.

A no-op pays `models` and `kept`; before the models were data classes it paid pydantic's import and every
model's validator in each run (~60 ms: models/base.py says why)."""

from __future__ import annotations

import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path

gc.disable()
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import pulumi  # noqa: E402, F401

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from controller import code_cache  # noqa: E402

code_cache.install()

start = time.perf_counter()
from controller import validated_config  # noqa: E402  (the config models, their loader and the kept config's reader)
from models.loader import read_stack_file  # noqa: E402

imported = time.perf_counter()
raw = read_stack_file(ROOT / "Pulumi.dev.yaml")
with tempfile.TemporaryDirectory() as cache:
    before = time.perf_counter()
    validated_config.load("dev", raw, Path(cache))  # nothing kept yet: validated, and kept
    validated = time.perf_counter()
    validated_config.load("dev", raw, Path(cache))
    kept = time.perf_counter()
print(
    json.dumps(
        {
            "models": 1000 * (imported - start),
            "validation": 1000 * (validated - before),
            "kept": 1000 * (kept - validated),
        }
    )
)
