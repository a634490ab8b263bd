#!/usr/bin/env bash
# vllm-fleet activate.sh: parameters rendered from the stack config
readonly STACK=prod
readonly DEPLOYMENT=primary
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/prod.primary
readonly UNIT_NAME=vllm-kimi-k25-int4.service
readonly UNIT_STEM=vllm-kimi-k25-int4
readonly SERVED_NAME=kimi-k2.5-int4
readonly PORT=8000
GPUS=(0 1 2 3 4 5 6 7)
readonly GPUS
readonly MODEL_DIR=/shared/kimi-k2.5-int4
readonly PYTHON=/root/ml-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly READY_TIMEOUT=4122
readonly UNIT_SHA256=5398804588428997fb7cada62a86d43abe6e76b5ee57d506b9716c5aef32dc41
readonly REPORT_EVERY=15
readonly JOURNAL_LINES=40
# vllm-fleet activate: make a deployment serve its staged unit, swapping out whatever it served before.
#
# Order (the one the team followed by hand, minus the hoping): refuse GPUs or a port another deployment
# holds; check the model files against their verified manifest; install the staged unit; stop the old
# unit (systemd stops its whole control group); start the new one, whose ExecStartPre guard waits for the
# GPUs and cleans /dev/shm and whose ExecStartPost waits until it serves; report progress while it loads.
# If it does not become ready in time, roll back: the previous unit is put back, started, and waited for,
# and this step fails with the new unit's journal tail. A failed swap leaves the host serving the old
# model, and the next `pulumi up` tries the swap again.
set -euo pipefail
: "$UNIT_SHA256" # the staged unit this activation is for; its change is what re-runs this step

log() { echo "[$DEPLOYMENT] $*"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

state_root=/var/lib/vllm-fleet
install -d -m 0755 "$state_root" "$state_root/gpu-claims" "$state_root/port-claims" "$state_root/unit-claims"
install -d -m 0700 "$STATE_DIR"
# One swap at a time per host: two deployments must not stop and start units underneath each other.
exec 9>"$state_root/host.lock"
flock -w 3600 9

owner="$STACK.$DEPLOYMENT"
refuse() { log "refused: $*" >&2; exit 1; }
claim_is_live() {
  # A claim counts while its owner's deployment exists on this host (its state directory is there).
  [ -d "$state_root/deployments/$1" ]
}
for gpu in "${GPUS[@]}"; do
  claim="$state_root/gpu-claims/$gpu"
  if [ -f "$claim" ]; then
    holder=$(cat "$claim")
    if [ "$holder" != "$owner" ] && claim_is_live "$holder"; then
      refuse "GPU $gpu is claimed by deployment $holder on this host; the two stacks overlap. Give this deployment other GPUs (deployments[].gpus) or destroy $holder first."
    fi
  fi
done
port_claim="$state_root/port-claims/$PORT"
if [ -f "$port_claim" ]; then
  holder=$(cat "$port_claim")
  if [ "$holder" != "$owner" ] && claim_is_live "$holder"; then
    refuse "port $PORT is claimed by deployment $holder on this host; choose another deployments[].port"
  fi
fi
unit_claim="$state_root/unit-claims/$UNIT_NAME"
if [ -f "$unit_claim" ]; then
  holder=$(cat "$unit_claim")
  if [ "$holder" != "$owner" ] && claim_is_live "$holder"; then
    refuse "unit $UNIT_NAME belongs to deployment $holder on this host; set deployments[].unitName or use another model name"
  fi
fi
for gpu in "${GPUS[@]}"; do echo "$owner" > "$state_root/gpu-claims/$gpu"; done
echo "$owner" > "$port_claim"
echo "$owner" > "$unit_claim"

staged_unit="$STATE_DIR/staged/$UNIT_NAME"
staged_env="$STATE_DIR/staged/$UNIT_STEM.env"
[ -f "$staged_unit" ] || refuse "nothing staged at $staged_unit; run pulumi up again"

log "checking $MODEL_DIR against its verified manifest"
"$PYTHON" "$TOOLS_DIR/model-sync" check --dir "$MODEL_DIR"

old_unit=""
old_served=""
if [ -f "$STATE_DIR/active" ]; then
  old_unit=$(sed -n 's/^UNIT=//p' "$STATE_DIR/active")
  old_served=$(sed -n 's/^SERVED=//p' "$STATE_DIR/active")
fi
unit_path="/etc/systemd/system/$UNIT_NAME"
env_path="/etc/vllm-fleet/$UNIT_STEM.env"

if [ "$old_unit" = "$UNIT_NAME" ] && cmp -s "$staged_unit" "$unit_path" && cmp -s "$staged_env" "$env_path" &&
  systemctl is-active --quiet "$UNIT_NAME"; then
  log "$UNIT_NAME already serves $SERVED_NAME with this configuration"
  exit 0
fi

# Keep what is there now, so a failed start can put it back exactly.
previous="$STATE_DIR/previous"
rm -rf "$previous"
install -d -m 0700 "$previous"
[ -f "$unit_path" ] && cp -p "$unit_path" "$previous/"
[ -f "$env_path" ] && cp -p "$env_path" "$previous/"

install -d -m 0755 /etc/vllm-fleet
install -m 0644 "$staged_unit" "$unit_path"
install -m 0600 "$staged_env" "$env_path"
systemctl daemon-reload

swap_start=$(now)
stop_seconds=0
if [ -n "$old_unit" ] && systemctl is-active --quiet "$old_unit"; then
  log "stopping $old_unit (serving $old_served)"
  t=$(now)
  systemctl stop "$old_unit"
  stop_seconds=$(since "$t")
  log "stopped $old_unit in ${stop_seconds} s"
fi
if [ -n "$old_unit" ] && [ "$old_unit" != "$UNIT_NAME" ]; then
  systemctl disable --quiet "$old_unit" 2>/dev/null || true
fi

# Wait for a unit to become active (= serving, thanks to its ExecStartPost); print progress meanwhile.
# Returns 0 when active, 1 when it failed or did not get there within the timeout.
wait_active() {
  local unit=$1 timeout=$2 started state restarts last_report=0 elapsed line
  started=$(date +%s)
  while true; do
    state=$(systemctl show -p ActiveState --value "$unit")
    restarts=$(systemctl show -p NRestarts --value "$unit")
    elapsed=$(( $(date +%s) - started ))
    case "$state" in
      active) return 0 ;;
      failed) log "$unit failed after ${elapsed} s"; return 1 ;;
    esac
    if [ "${restarts:-0}" -gt 0 ]; then
      log "$unit failed after ${elapsed} s and systemd is restarting it"
      return 1
    fi
    if [ "$elapsed" -ge "$timeout" ]; then
      log "$unit is not ready after ${timeout} s (state: $state)"
      return 1
    fi
    if [ $((elapsed - last_report)) -ge "$REPORT_EVERY" ]; then
      line=$(journalctl -u "$unit" -n 1 -o cat --no-pager 2>/dev/null | cut -c1-200)
      log "starting $unit: ${elapsed}/${timeout} s, state $state; last log: ${line:-none}"
      last_report=$elapsed
    fi
    sleep 1
  done
}

systemctl reset-failed "$UNIT_NAME" 2>/dev/null || true
systemctl enable --quiet "$UNIT_NAME"
log "starting $UNIT_NAME (serving $SERVED_NAME on port $PORT; up to $READY_TIMEOUT s)"
start_at=$(now)
journal_cursor=$(journalctl -n 0 --show-cursor -o cat 2>/dev/null | sed -n 's/^-- cursor: //p')
systemctl start --no-block "$UNIT_NAME"
if wait_active "$UNIT_NAME" "$READY_TIMEOUT"; then
  ready_seconds=$(since "$start_at")
  printf 'UNIT=%s\nSERVED=%s\nPORT=%s\n' "$UNIT_NAME" "$SERVED_NAME" "$PORT" > "$STATE_DIR/active.tmp"
  mv -f "$STATE_DIR/active.tmp" "$STATE_DIR/active"
  if [ -n "$old_unit" ] && [ "$old_unit" != "$UNIT_NAME" ]; then
    rm -f "/etc/systemd/system/$old_unit" "/etc/vllm-fleet/${old_unit%.service}.env" "$state_root/unit-claims/$old_unit"
    systemctl daemon-reload
    systemctl reset-failed "$old_unit" 2>/dev/null || true
  fi
  rm -rf "$previous"
  log "serving $SERVED_NAME from $UNIT_NAME on port $PORT"
  log "timing: stop=${stop_seconds}s start_to_ready=${ready_seconds}s total=$(since "$swap_start")s"
  exit 0
fi

# ---- rollback ---------------------------------------------------------------------------------------
if [ -n "$journal_cursor" ]; then
  # With --after-cursor, -n would count from the cursor: take the whole run, then its end.
  tail_lines=$(journalctl -u "$UNIT_NAME" --after-cursor "$journal_cursor" -o cat --no-pager 2>/dev/null |
    tail -n "$JOURNAL_LINES" || true)
else
  tail_lines=$(journalctl -u "$UNIT_NAME" -n "$JOURNAL_LINES" -o cat --no-pager 2>/dev/null || true)
fi
systemctl stop "$UNIT_NAME" 2>/dev/null || true
systemctl reset-failed "$UNIT_NAME" 2>/dev/null || true
if [ -f "$previous/$UNIT_NAME" ]; then
  install -m 0644 "$previous/$UNIT_NAME" "$unit_path"
  if [ -f "$previous/$UNIT_STEM.env" ]; then install -m 0600 "$previous/$UNIT_STEM.env" "$env_path"; fi
else
  systemctl disable --quiet "$UNIT_NAME" 2>/dev/null || true
  rm -f "$unit_path" "$env_path"
fi
systemctl daemon-reload
rolled_back="nothing was serving before, so nothing was restarted"
if [ -n "$old_unit" ] && [ -f "/etc/systemd/system/$old_unit" ]; then
  log "rolling back: starting $old_unit (serving $old_served) again"
  systemctl enable --quiet "$old_unit"
  systemctl start --no-block "$old_unit"
  if wait_active "$old_unit" "$READY_TIMEOUT"; then
    rolled_back="rolled back: $old_unit serves $old_served again"
  else
    rolled_back="ROLLBACK FAILED: $old_unit did not become ready either; the host serves nothing on port $PORT"
  fi
else
  for gpu in "${GPUS[@]}"; do rm -f "$state_root/gpu-claims/$gpu"; done
  rm -f "$port_claim" "$unit_claim"
fi
{
  echo "swap of deployment $DEPLOYMENT to $UNIT_NAME failed; $rolled_back."
  echo "last lines of the $UNIT_NAME journal:"
  while IFS= read -r line; do echo "  | $line"; done <<< "$tail_lines"
} >&2
exit 1
