#!/usr/bin/env bash
# vllm-fleet host tools removal: only once no deployment of any stack is left on the host.
set -euo pipefail

if [ -n "$(ls -A /var/lib/vllm-fleet/deployments 2>/dev/null)" ]; then
  echo "keeping $TOOLS_DIR: other deployments on this host still use it"
  exit 0
fi
rm -rf -- "$TOOLS_DIR" /var/lib/vllm-fleet
echo "removed $TOOLS_DIR and /var/lib/vllm-fleet"
