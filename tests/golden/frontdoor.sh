#!/usr/bin/env bash
# vllm-fleet frontdoor.sh: parameters rendered from the stack config
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
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
install -d -m 0755 /etc/vllm-fleet/frontdoor
cat > /etc/vllm-fleet/frontdoor/nginx.conf.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
# Managed by vllm-fleet: the front door of this host's vLLM deployments. `pulumi up` overwrites this
# file. Each deployment's server block is in sites/, written by the swap on the host when it switches
# the deployment to another engine; a graceful reload lets requests in flight finish on the old one.
daemon off;
worker_processes 2;
pid /run/vllm-fleet-frontdoor.pid;
error_log stderr warn;
# Old workers finish the requests they carry after a reload for at most this long (long generations).
worker_shutdown_timeout 3600s;

events {
    worker_connections 4096;
}

http {
    access_log off;
    server_tokens off;
    client_max_body_size 64m;
    # Streamed answers (stream: true) reach the client token by token.
    proxy_buffering off;
    proxy_request_buffering off;
    proxy_http_version 1.1;
    proxy_connect_timeout 5s;
    proxy_read_timeout 3600s;
    proxy_send_timeout 3600s;
    # Each deployment's accepted API keys (a map per deployment, 0600), written by its access step.
    include /etc/vllm-fleet/frontdoor/keys/*.conf;
    include /etc/vllm-fleet/frontdoor/sites/*.conf;
}
VLLM_FLEET_EOF
chmod 0644 /etc/vllm-fleet/frontdoor/nginx.conf.vllm-fleet-tmp
mv -f /etc/vllm-fleet/frontdoor/nginx.conf.vllm-fleet-tmp /etc/vllm-fleet/frontdoor/nginx.conf
install -d -m 0755 /etc/systemd/system
cat > /etc/systemd/system/vllm-fleet-frontdoor.service.vllm-fleet-tmp <<'VLLM_FLEET_EOF'
# Managed by vllm-fleet: the front door of this host's vLLM deployments. `pulumi up` overwrites this file.
# Debian's nginx with a configuration of its own; the distribution's nginx.service is left as it was.
[Unit]
Description=vllm-fleet front door (nginx) for the vLLM deployments of this host
Documentation=https://nginx.org/en/docs/
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
ExecStartPre=/usr/sbin/nginx -t -q -c /etc/vllm-fleet/frontdoor/nginx.conf
ExecStart=/usr/sbin/nginx -c /etc/vllm-fleet/frontdoor/nginx.conf
# A reload is graceful: new workers take new connections, old ones finish what they carry.
ExecReload=/usr/sbin/nginx -t -q -c /etc/vllm-fleet/frontdoor/nginx.conf
ExecReload=/bin/kill -HUP $MAINPID
# QUIT is nginx's graceful stop: requests in flight finish first.
KillSignal=SIGQUIT
KillMode=mixed
TimeoutStopSec=60
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target
VLLM_FLEET_EOF
chmod 0644 /etc/systemd/system/vllm-fleet-frontdoor.service.vllm-fleet-tmp
mv -f /etc/systemd/system/vllm-fleet-frontdoor.service.vllm-fleet-tmp /etc/systemd/system/vllm-fleet-frontdoor.service
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
