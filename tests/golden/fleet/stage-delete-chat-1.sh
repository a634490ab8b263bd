#!/usr/bin/env bash
# vllm-fleet stage-delete.sh: parameters rendered from the stack config
readonly DEPLOYMENT=chat-1
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.chat-1
# vllm-fleet stage removal: forget the staged unit and secret environment of a deployment.
set -euo pipefail

rm -rf -- "$STATE_DIR/staged"
rmdir "$STATE_DIR" 2>/dev/null || true
echo "unstaged deployment $DEPLOYMENT"
