#!/usr/bin/env bash
# vllm-fleet activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly UNIT_SHA256=f248b52dd251cde33631409f76b0ed8562708c4063b501db07d4b64eec9c2503
readonly REPAIRS=0
readonly PLAN='{
 "access_dir": "/etc/vllm-fleet/frontdoor/access/fleet.across",
 "backend_ports": [
  18002,
  28002
 ],
 "bind_address": "127.0.0.1",
 "deployment": "across",
 "drain_seconds": 120,
 "foreign_gpu_processes": "refuse",
 "gpus": [
  2
 ],
 "gpus_needed": 1,
 "journal_lines": 40,
 "keys_file": "/etc/vllm-fleet/frontdoor/keys/fleet.across.conf",
 "load_dir": "/shared/tiny-chat-a",
 "model_dir": "/shared/tiny-chat-a",
 "port": 8002,
 "prewarm_margin_gib": 8.0,
 "python": "/opt/vllm-env/bin/python3",
 "readiness_address": "127.0.0.1",
 "ready_timeout": 540,
 "replaces": [],
 "report_every": 15,
 "served_name": "across",
 "stack": "fleet",
 "state_dir": "/var/lib/vllm-fleet/deployments/fleet.across",
 "swap_mode": "stop-start",
 "tools_dir": "/usr/local/lib/vllm-fleet",
 "unit_name": "vllm-across.service",
 "unit_sha256": "f248b52dd251cde33631409f76b0ed8562708c4063b501db07d4b64eec9c2503",
 "unit_stem": "vllm-across"
}'
# vllm-fleet activate: make a deployment serve its staged unit (a swap, when the model changed).
#
# The swap itself is host/swap.py, run as a transient systemd unit on the host: it checks everything it
# can while the old model serves, then stops the old units (the deployment's previous unit and the
# hand-made ones it replaces), starts the new one, waits until it serves, and puts the old ones back if
# it does not. Running there, it finishes whatever happens to this SSH session or the controller. This
# step writes the plan, starts the transaction (or attaches to one already running for this
# deployment), shows its journal as it goes and exits with its result.
set -euo pipefail
: "$UNIT_SHA256" # the staged unit this activation is for; its change is what re-runs this step
# Drift repairs: one more than the host's count when the survey found the unit file edited or removed by
# hand, which re-runs this step; the swap then puts the staged unit back.
: "$REPAIRS"

install -d -m 0700 "$STATE_DIR"
printf '%s\n' "$REPAIRS" > "$STATE_DIR/repairs"
printf '%s\n' "$PLAN" > "$STATE_DIR/swap-plan.json.tmp"
mv -f "$STATE_DIR/swap-plan.json.tmp" "$STATE_DIR/swap-plan.json"
exec "$PYTHON" "$TOOLS_DIR/swap" start --plan "$STATE_DIR/swap-plan.json"
