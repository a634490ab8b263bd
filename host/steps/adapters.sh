#!/usr/bin/env bash
# vllm-fleet adapters: the LoRA adapters a deployment serves, loaded into its running engine with no
# restart (host/adapters.py): every adapter's files are checked first, then the wanted set is recorded
# for the engine's next starts and applied through the engine's loopback endpoints. The unit file and the
# engine's launch do not change, so neither does the serving step.
set -euo pipefail
# Drift repairs: one more than the host's count when the survey found the engine's adapters differ from
# the wanted ones (one loaded by hand, one missing), which re-runs this step.
: "$REPAIRS"

install -d -m 0700 "$STATE_DIR"
printf '%s\n' "$REPAIRS" > "$STATE_DIR/adapter-repairs"
printf '%s\n' "$ADAPTERS" | "$PYTHON" "$TOOLS_DIR/adapters" apply --state-dir "$STATE_DIR" --max-rank "$MAX_RANK"
