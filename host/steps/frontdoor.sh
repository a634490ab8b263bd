#!/usr/bin/env bash
# vllm-fleet front door: Debian's nginx, run by its own unit with its own configuration, listening on
# each deployment's port and passing requests to the engine that serves it now (a site per deployment,
# written by the swap). Installs the nginx package when the host lacks it, without starting the
# distribution's nginx.service; writes its configuration (NGINX_CONF) and unit (UNIT_TEXT, as UNIT_FILE),
# each whole or not at all; then checks, enables, starts or reloads it.
set -euo pipefail

if [ ! -x /usr/sbin/nginx ]; then
  echo "front door: installing Debian's nginx"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's way to keep a package's service from starting on install: policy-rc.d exiting 101.
  policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    policy_added=1
  fi
  remove_policy() { if [ "$policy_added" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi; }
  trap remove_policy EXIT
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nginx >/dev/null
  systemctl disable --quiet nginx.service 2>/dev/null || true
fi
install -d -m 0755 "$FRONT_DOOR_DIR" "$FRONT_DOOR_DIR/sites" "$FRONT_DOOR_DIR/access" "$FRONT_DOOR_DIR/keys"
write() { # PATH CONTENT: written beside, then renamed into place
  install -d -m 0755 "$(dirname "$1")"
  printf '%s\n' "$2" >"$1.vllm-fleet-tmp"
  chmod 0644 "$1.vllm-fleet-tmp"
  mv -f "$1.vllm-fleet-tmp" "$1"
}
write "$FRONT_DOOR_DIR/nginx.conf" "$NGINX_CONF"
write "$UNIT_FILE" "$UNIT_TEXT"
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
