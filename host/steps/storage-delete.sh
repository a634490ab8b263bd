#!/usr/bin/env bash
# vllm-fleet storage removal: leave the storage as it was found. Model directories are removed by
# their own downloads; here only the layout this project created goes, and only when empty.
set -euo pipefail

rm -f "$KEEP_LIST"
rmdir "$HF_HOME_DIR/hub" "$HF_HOME_DIR" 2>/dev/null || true
echo "storage $STORAGE_PATH released (kept: it may hold data vllm-fleet does not manage)"
