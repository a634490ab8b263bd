#!/usr/bin/env bash
# vllm-fleet adapters delete: the deployment serves no adapter any more (it dropped them, or is being
# removed): the running engine unloads them, with no restart, and its next starts load none.
set -euo pipefail

if [ ! -d "$STATE_DIR" ]; then
  echo "adapters: the deployment's state is gone already; nothing to unload"
  exit 0
fi
printf '{"adapters": []}\n' | "$PYTHON" "$TOOLS_DIR/adapters" apply --state-dir "$STATE_DIR" --max-rank 512
# Nothing of the adapters stays behind: a deployment being removed leaves an empty state directory.
rm -f "$STATE_DIR/adapters.json" "$STATE_DIR/adapter-repairs"
