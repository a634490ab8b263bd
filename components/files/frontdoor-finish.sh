#!/usr/bin/env bash
# The end of the front door step (after its files are written): check, enable, start or reload.
if ! out=$(/usr/sbin/nginx -t -q -c "$FRONT_DOOR_DIR/nginx.conf" 2>&1); then
  echo "the front door's nginx configuration does not pass nginx -t:" >&2
  echo "$out" >&2
  exit 1
fi
systemctl daemon-reload
systemctl enable --quiet "$FRONT_DOOR_UNIT"
if systemctl is-active --quiet "$FRONT_DOOR_UNIT"; then
  systemctl reload "$FRONT_DOOR_UNIT"
else
  systemctl start "$FRONT_DOOR_UNIT"
fi
sites=$(find "$FRONT_DOOR_DIR/sites" -maxdepth 1 -name '*.conf' | wc -l)
echo "front door: $FRONT_DOOR_UNIT active ($(/usr/sbin/nginx -v 2>&1 | sed 's/^nginx version: //'), $sites deployment site(s))"
