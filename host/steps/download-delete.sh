#!/usr/bin/env bash
# vllm-fleet model removal: runs when a model is no longer wanted (after the swap that replaced it
# succeeded) or on destroy. Whether it stays is decided by the program that runs now, not the one
# that downloaded it: the storage step wrote the current list of kept model directories (keep: true)
# to $KEEP_LIST (this stack's list) before any removal runs.
set -euo pipefail

if [ -f "$KEEP_LIST" ] && grep -qxF -- "${MODEL_DIR##*/}" "$KEEP_LIST"; then
  echo "model $MODEL: kept on disk at $MODEL_DIR (keep: true)"
  exit 0
fi
case "$MODEL_DIR" in
  "$STORAGE_PATH"/?*) ;;
  *) echo "refusing to delete $MODEL_DIR: it is not inside $STORAGE_PATH" >&2; exit 1 ;;
esac
if systemctl list-units --state=active --no-legend 'vllm-*.service' 2>/dev/null | awk '{print $1}' |
  xargs -r -I{} systemctl show -p ExecStart --value {} | grep -qF -- "--model $MODEL_DIR "; then
  echo "refusing to delete $MODEL_DIR: a running vLLM unit still serves it" >&2
  exit 1
fi
if [ -d "$MODEL_DIR" ]; then
  freed=$(du -sb "$MODEL_DIR" | cut -f1)
  rm -rf -- "$MODEL_DIR"
  echo "model $MODEL: removed $MODEL_DIR, freed $((freed / 1000000)) MB"
else
  echo "model $MODEL: $MODEL_DIR already absent"
fi
