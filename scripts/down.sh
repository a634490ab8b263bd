#!/usr/bin/env bash
# `make down`: destroy the dev stack (stops and removes the units on the sandbox), then take the mirror
# and the sandbox hosts (the dev one and any fleet-N) down so nothing of them is left: no process, mount
# or network namespace.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
cd "$VLLM_FLEET_ROOT"
# The dev stack lives on the local backend, whatever backend the shell chose for shared stacks.
export PULUMI_BACKEND_URL="$VLLM_FLEET_DEV_BACKEND_URL"

if [ -x .tools/bin/pulumi ] && sandbox/host.sh status >/dev/null 2>&1; then
  pulumi destroy --stack dev --yes || echo "==> down: destroy failed; the sandbox is discarded anyway"
fi
rm -f .state/dev-sandbox-instance
scripts/mirror.sh down
# The fleet's hosts too (`sandbox/host.sh fleet-up`, the fleet stack): they are thrown away with their state.
sandbox/host.sh fleet-down
sandbox/host.sh down
