#!/usr/bin/env bash
# vllm-fleet deactivate: stop serving a deployment and leave the host as it was found: its front door
# site is removed, the unit is stopped (its whole control group), disabled and removed, systemd reloaded, /dev/shm cleaned, and the
# deployment's claims on GPUs, port and unit name released; hand-made units it took over are put back as they were.
set -euo pipefail

log() { echo "[$DEPLOYMENT] $*"; }
state_root=/var/lib/vllm-fleet
exec 9>"$state_root/host.lock" 2>/dev/null || { log "nothing of vllm-fleet on this host"; exit 0; }
flock -w 3600 9

# Clients first: the front door stops passing requests to this deployment (its port is closed).
site="$FRONT_DOOR_DIR/sites/$STACK.$DEPLOYMENT.conf"
if [ -f "$site" ]; then
  rm -f "$site"
  if systemctl is-active --quiet "$FRONT_DOOR_UNIT"; then systemctl reload "$FRONT_DOOR_UNIT" || true; fi
  log "removed its site from the front door"
fi

units=("$UNIT_NAME")
if [ -f "$STATE_DIR/active" ]; then
  units+=("$(sed -n 's/^UNIT=//p' "$STATE_DIR/active")")
fi
for unit in $(printf '%s\n' "${units[@]}" | sort -u); do
  if systemctl cat "$unit" >/dev/null 2>&1; then
    systemctl stop "$unit" || true
    systemctl disable --quiet "$unit" 2>/dev/null || true
    log "stopped and disabled $unit"
  fi
  rm -f "/etc/systemd/system/$unit" "/etc/vllm-fleet/${unit%.service}.env" "/etc/vllm-fleet/${unit%.service}.placement.env" \
    "/etc/systemd/system/$unit.d/50-vllm-fleet-adopted.conf"
  rmdir "/etc/systemd/system/$unit.d" 2>/dev/null || true  # only when empty: an operator's drop-ins stay
  systemctl reset-failed "$unit" 2>/dev/null || true
done
systemctl daemon-reload
"$TOOLS_DIR/clean-shm" || true
# The hand-made units its take-over put away go back as they were: file, enabled, running.
for was in "$STATE_DIR"/adopted/*.service.was; do
  [ -f "$was" ] || continue
  unit=$(basename "$was" .was)
  target=$(sed -n 's/.*"path": "\([^"]*\)".*/\1/p' "$was")
  install -m 0644 "$STATE_DIR/adopted/$unit" "${target:-/etc/systemd/system/$unit}"
  systemctl daemon-reload
  if grep -q '"enabled": true' "$was"; then systemctl enable --quiet "$unit" || true; fi
  if grep -q '"running": true' "$was"; then systemctl start --no-block "$unit" || true; fi
  log "put back $unit as it was before the take-over"
done
# The staging copy the engine loaded from (hosts[].stagingPath), unless another deployment loads it too.
staged=""
if [ -f "$STATE_DIR/active" ]; then staged=$(sed -n 's/^STAGED_COPY=//p' "$STATE_DIR/active"); fi
if [ -n "$staged" ] && [ -n "$STAGING_PATH" ] && [ "${staged#"$STAGING_PATH"/}" != "$staged" ]; then
  shared_by=$(grep -lsx "STAGED_COPY=$staged" "$state_root"/deployments/*/active | grep -vx "$STATE_DIR/active" || true)
  if [ -z "$shared_by" ]; then
    rm -rf -- "$staged"
    log "removed the staging copy $staged"
  fi
fi
owner="$STACK.$DEPLOYMENT"
rm -f "$state_root/claims/$owner.json"
rm -rf -- "$STATE_DIR/active" "$STATE_DIR/previous" "$STATE_DIR/adopted" "$STATE_DIR/swap-plan.json" \
  "$STATE_DIR/swap-result.json" "$STATE_DIR/repairs"
rmdir /etc/vllm-fleet 2>/dev/null || true  # only when empty: the front door keeps its files
log "removed"
