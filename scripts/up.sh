#!/usr/bin/env bash
# `make up`: bring up the sandbox host and the mirror, deploy the dev stack, and chat with the model.
set -euo pipefail
# shellcheck source=scripts/prelude.sh
source "$(dirname "$0")/prelude.sh"
# The dev stack lives on the local backend, whatever backend the shell chose for shared stacks.
export PULUMI_BACKEND_URL="$VLLM_FLEET_DEV_BACKEND_URL"
# Each step prints one line; its whole output goes to this log (pulumi's, with --diff), which a failure names.
LOG="$VLLM_FLEET_LOGS/up.log"
mkdir -p "$VLLM_FLEET_LOGS"
: >"$LOG"

# State written by vllm-fleet's old dynamic provider (before pulumi-command) describes steps the engine
# can no longer run. The sandbox is disposable: discard it and the dev state, and deploy afresh.
if pulumi stack export --stack dev 2>/dev/null | grep -q '"type": "pulumi-python:dynamic:Resource"'; then
  echo "[up] the dev stack's state comes from the old dynamic provider; starting the sandbox and the dev stack afresh"
  progress up "taking the old sandbox down" "" "$LOG" sandbox/host.sh down
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
  echo "[up] the sandbox was rebuilt since the last deploy; starting the dev stack's state afresh"
  pulumi stack rm dev --force --yes --preserve-config >/dev/null
  pulumi stack init dev --secrets-provider passphrase --non-interactive >/dev/null
fi
echo "$instance" > "$recorded"

progress up "deploying the dev stack (pulumi up)" "a chat with the model" "$LOG" pulumi up --stack dev --yes --diff
# What changed, on one line ("Resources: + 18 created"), from pulumi's summary at the end of the log.
# The preview prints a Resources: block of its own first: only the last block (the update's) counts.
summary=$(awk '/^Resources:/ { found = ""; block = 1; next } /^Duration:/ { block = 0 }
  block && /^    .*[0-9]/ { sub(/^ +/, ""); found = found (found == "" ? "" : ", ") $0 } END { print found }' "$LOG")
echo "[up] resources: ${summary:-see $LOG} (pulumi's whole output: $LOG)"
"$VENV/python" -m scripts.chat --stack dev
