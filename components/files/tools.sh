#!/usr/bin/env bash
# vllm-fleet host tools: the GPU-release guard, readiness check, model verifier and /dev/shm cleaner
# that units and steps call on the host. The files follow this header; each is written atomically.
set -euo pipefail

install -d -m 0755 "$TOOLS_DIR"
