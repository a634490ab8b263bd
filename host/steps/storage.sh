#!/usr/bin/env bash
# vllm-fleet storage: make the shared model storage's layout exist with the right owner, and report
# its size. Safe to run again: it only creates what is missing.
set -euo pipefail

install -d -m 0755 -o "$OWNER" "$STORAGE_PATH"
install -d -m 0755 -o "$OWNER" "$HF_HOME_DIR" "$HF_HOME_DIR/hub"
# The model directories this stack keeps (keep: true); its model removals read it. One list per stack:
# stacks that share the path decide each for themselves.
printf '%s\n' "${KEEP_DIRS[@]}" > "$KEEP_LIST.tmp"
mv -f "$KEEP_LIST.tmp" "$KEEP_LIST"
read -r total used free < <(df -B1 --output=size,used,avail "$STORAGE_PATH" | tail -n 1)
echo "storage $STORAGE_PATH: $((free / 1000000000)) GB free of $((total / 1000000000)) GB"
printf '{"bytesTotal": %s, "bytesUsed": %s, "bytesFree": %s}\n' "$total" "$used" "$free"
