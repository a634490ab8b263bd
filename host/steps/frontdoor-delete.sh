#!/usr/bin/env bash
# vllm-fleet front door removal: stop and remove the front door's unit and configuration once no
# deployment has a site in it. The nginx package stays (other software may use it).
set -euo pipefail

if [ -d "$FRONT_DOOR_DIR/sites" ] && [ -n "$(find "$FRONT_DOOR_DIR/sites" -maxdepth 1 -name '*.conf' -print -quit)" ]; then
  echo "front door: deployments still have sites in $FRONT_DOOR_DIR/sites; left running" >&2
  exit 0
fi
systemctl disable --now --quiet "$FRONT_DOOR_UNIT" 2>/dev/null || true
rm -f "/etc/systemd/system/$FRONT_DOOR_UNIT"
rm -rf -- "$FRONT_DOOR_DIR"
systemctl daemon-reload
systemctl reset-failed "$FRONT_DOOR_UNIT" 2>/dev/null || true
echo "front door: removed"
