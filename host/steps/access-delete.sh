#!/usr/bin/env bash
# vllm-fleet access removal: the deployment's access files and its keys' map go once its site is gone
# (the serving step removes the site first); the front door reloads so no key of it stays in memory.
set -euo pipefail

if [ -f "$SITE" ]; then
  echo "access of $OWNER: its site $SITE still exists; its access files stay" >&2
  exit 0
fi
rm -rf -- "$ACCESS_DIR" "$ACCESS_DIR.new" "$ACCESS_DIR.old"
rm -f -- "$KEYS_FILE" "$KEYS_FILE.new" "$KEYS_FILE.old"
if systemctl is-active --quiet "$FRONT_DOOR_UNIT" && /usr/sbin/nginx -t -q -c "$FRONT_DOOR_DIR/nginx.conf" 2>/dev/null; then
  systemctl reload "$FRONT_DOOR_UNIT" || true
fi
echo "access of $OWNER: removed"
