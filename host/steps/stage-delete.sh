#!/usr/bin/env bash
# vllm-fleet stage removal: forget the staged unit and secret environment of a deployment.
set -euo pipefail

rm -rf -- "$STATE_DIR/staged"
rmdir "$STATE_DIR" 2>/dev/null || true
echo "unstaged deployment $DEPLOYMENT"
