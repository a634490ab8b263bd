#!/usr/bin/env bash
# vllm-fleet front door: Debian's nginx, run by its own unit with its own configuration, listening on
# each deployment's port and passing requests to the engine that serves it now (a site per deployment,
# written by the swap). Installs the nginx package when the host lacks it, without starting the
# distribution's nginx.service. The configuration and unit follow this header.
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
