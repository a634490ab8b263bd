#!/usr/bin/env bash
# `make up`: bring up the sandbox host and the mirror, deploy the dev stack, and chat with the model.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
cd "$VLLM_FLEET_ROOT"
# The dev stack lives on the local backend, whatever backend the shell chose for shared stacks.
export PULUMI_BACKEND_URL="$VLLM_FLEET_DEV_BACKEND_URL"

# State written by vllm-fleet's old dynamic provider (before pulumi-command) describes steps the engine
# can no longer run. The sandbox is disposable: discard it and the dev state, and deploy afresh.
if pulumi stack export --stack dev 2>/dev/null | grep -q '"type": "pulumi-python:dynamic:Resource"'; then
  echo "==> up: the dev stack's state comes from the old dynamic provider; starting the sandbox and the dev stack afresh"
  sandbox/host.sh down
  pulumi stack rm dev --force --yes --preserve-config >/dev/null
  pulumi stack init dev --secrets-provider passphrase --non-interactive >/dev/null
  rm -f .state/dev-sandbox-instance
fi

sandbox/host.sh up
scripts/mirror.sh up

# The sandbox's disk is new after `make down`; state that describes an older sandbox must go, or
# `pulumi up` would believe its resources still exist there.
# shellcheck disable=SC2016  # expanded on the sandbox, not here
instance=$(sandbox/host.sh ssh 'mkdir -p /etc/vllm-fleet-sandbox; f=/etc/vllm-fleet-sandbox/instance-id;
  [ -s "$f" ] || cat /proc/sys/kernel/random/uuid > "$f"; cat "$f"')
recorded=.state/dev-sandbox-instance
if [ -f "$recorded" ] && [ "$(cat "$recorded")" != "$instance" ]; then
  echo "==> up: the sandbox was rebuilt since the last deploy; starting the dev stack's state afresh"
  pulumi stack rm dev --force --yes --preserve-config >/dev/null
  pulumi stack init dev --secrets-provider passphrase --non-interactive >/dev/null
fi
echo "$instance" > "$recorded"

pulumi up --stack dev --yes --diff
"$VENV/python" -m scripts.chat --stack dev
