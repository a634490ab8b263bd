#!/usr/bin/env bash
# vllm-fleet host tools: the directory of the GPU-release guard, readiness check, model verifier, swap
# and the rest, which units and steps call on the host. Each tool is installed by a step of its own.
set -euo pipefail

install -d -m 0755 "$TOOLS_DIR"
echo "tools directory $TOOLS_DIR ready"
