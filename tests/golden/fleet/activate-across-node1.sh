#!/usr/bin/env bash
# vllm-fleet node-activate.sh: parameters rendered from the stack config
readonly STACK=fleet
readonly DEPLOYMENT=across.node1
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly UNIT_NAME=vllm-across-node1.service
readonly UNIT_STEM=vllm-across-node1
readonly GPUS=2
readonly GPUS_JSON='[2]'
readonly UNIT_SHA256=d4158694000dae36793f75ce43ccd811bfa09595b859de828b15f3724f9c32ad
# vllm-fleet node-activate: make a worker node of a multi-node deployment run its staged headless engine.
#
# Runs after every node staged and checked its unit (while the old model served) and before the head's
# swap: it claims this node's GPUs for the deployment (refusing GPUs another deployment on this host
# claims), stops the deployment's previous engine here, installs the staged unit and starts it. The
# unit's own ExecStartPre waits for the GPUs to be released. The engine then waits for the head at the
# master address, which the head's swap starts next.
set -euo pipefail
: "$UNIT_SHA256" # the staged unit this activation is for; its change is what re-runs this step

log() { echo "[$DEPLOYMENT] $*"; }
state_root=/var/lib/vllm-fleet
install -d -m 0755 "$state_root" "$state_root/claims"
exec 9>"$state_root/host.lock"
flock -w 3600 9

staged="$STATE_DIR/staged"
[ -f "$staged/$UNIT_NAME" ] || {
  echo "no staged $UNIT_NAME in $staged: the unit step did not run" >&2
  exit 1
}
owner="$STACK.$DEPLOYMENT"
for claim in "$state_root"/claims/*.json; do
  [ -e "$claim" ] || continue
  other=$(basename "$claim" .json)
  if [ "$other" = "$owner" ] || [ ! -d "$state_root/deployments/$other" ]; then continue; fi
  for gpu in $GPUS; do
    if grep -Eq "\"gpus\": \[([0-9]+, )*$gpu(, [0-9]+)*\]" "$claim"; then
      echo "GPU $gpu is claimed by deployment $other on this host; nothing was stopped" >&2
      exit 1
    fi
  done
done
printf '{"gpus": %s, "ports": [], "units": ["%s"]}\n' "$GPUS_JSON" "$UNIT_NAME" > "$state_root/claims/$owner.json.tmp"
mv -f "$state_root/claims/$owner.json.tmp" "$state_root/claims/$owner.json"

previous=""
if [ -f "$STATE_DIR/active" ]; then previous=$(sed -n 's/^UNIT=//p' "$STATE_DIR/active"); fi
if [ -n "$previous" ] && [ "$previous" != "$UNIT_NAME" ]; then
  systemctl stop "$previous" || true
  systemctl disable --quiet "$previous" 2>/dev/null || true
  rm -f "/etc/systemd/system/$previous" "/etc/vllm-fleet/${previous%.service}.env"
  log "stopped and removed $previous"
fi
install -d -m 0755 /etc/vllm-fleet
install -m 0644 "$staged/$UNIT_NAME" "/etc/systemd/system/$UNIT_NAME"
install -m 0600 "$staged/$UNIT_STEM.env" "/etc/vllm-fleet/$UNIT_STEM.env"
systemctl daemon-reload
systemctl enable --quiet "$UNIT_NAME"
# Type=exec: returns once the GPU-release guard passed and the engine was executed.
systemctl restart "$UNIT_NAME"
printf 'UNIT=%s\n' "$UNIT_NAME" > "$STATE_DIR/active.tmp"
mv -f "$STATE_DIR/active.tmp" "$STATE_DIR/active"
sleep 3
if ! systemctl is-active --quiet "$UNIT_NAME"; then
  journalctl -u "$UNIT_NAME" -n 30 --no-pager -o cat >&2 || true
  echo "$UNIT_NAME did not keep running; the head was not touched" >&2
  exit 1
fi
log "$UNIT_NAME runs (headless, GPUs ${GPUS:-none}); it joins the head once the head's engine starts"
