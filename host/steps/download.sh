#!/usr/bin/env bash
# vllm-fleet model download: bring one pinned revision onto the shared storage and verify it.
# The Hugging Face token arrives on stdin (never argv or the unit), travels to `hf download` in its
# environment only, and is never printed. REPAIRS: one more than the count model-sync recorded for this
# stack when the survey found files missing or changed since they were verified, which re-runs this step;
# model-sync fetches them again, verifies them and records the count.
set -euo pipefail

IFS= read -r HF_TOKEN || true
if [ -n "$HF_TOKEN" ]; then export HF_TOKEN; else unset HF_TOKEN; fi
if [ -n "$ENDPOINT" ]; then export HF_ENDPOINT="$ENDPOINT"; fi
export HF_HOME="$HF_HOME_DIR" HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_UPDATE_CHECK=1
export HF_HUB_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
echo "model $MODEL: $REPO@$REVISION -> $MODEL_DIR"
exec "$PYTHON" "$TOOLS_DIR/model-sync" sync --repo "$REPO" --revision "$REVISION" --dir "$MODEL_DIR" \
  --margin-gb "$MARGIN_GB" --stack "$STACK" --repairs "$REPAIRS"
