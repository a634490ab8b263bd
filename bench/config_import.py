"""What the config models cost each run of the program, before any config is read: pydantic's import and the
creation of the model classes (each builds its validator). Run by `make bench ARGS=noop` in a fresh
interpreter per sample, set up as `__main__.py` sets itself up before its imports (the collector off, no
pydantic plugins, the generated-code cache installed, `import pulumi` done), so the figures are the ones
the program pays; it prints them as JSON (ms). The bench reports them beside the no-op's ratio: the
models are the program's largest import, and an `up` runs the program twice."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

gc.disable()
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import pulumi  # noqa: E402, F401

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from controller import code_cache  # noqa: E402

code_cache.install()

start = time.perf_counter()
import pydantic  # noqa: E402, F401
from pydantic import BaseModel  # noqa: E402, F401

imported = time.perf_counter()
import models.loader  # noqa: E402, F401  (every config model: the loader validates the whole stack)

built = time.perf_counter()
print(json.dumps({"pydantic": 1000 * (imported - start), "models": 1000 * (built - imported)}))
