"""The checkout's own folders that the controller's side, the bench and the scripts name.

`CACHE` is the checkout's cache folder, `.cache` beside `__main__.py`: the survey's cache
(`controller/checks.py`), the host package's archive (`render/host_bundle.py`) and the mirror's repos
(`bench/run.py`) live below it. The shell scripts spell it themselves (`sandbox/host.sh`,
`sandbox/vllm-wheelhouse.sh`, `scripts/mirror.sh`). Not the Hugging Face client's `.cache/huggingface` on a
host (`host/model_files.HF_CACHE`), which is that client's folder, not ours.

Files there are written whole through the host package's `host/swap_files.write_file`, the one helper both
sides of the wire share."""

from __future__ import annotations

CACHE = ".cache"
