#!/usr/bin/env bash
# vllm-fleet frontdoor.sh: parameters rendered from the stack config
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
# shellcheck disable=SC2016  # data, never expanded
readonly NGINX_CONF='# Managed by vllm-fleet: the front door of this host'"'"'s vLLM deployments. `pulumi up` overwrites this
# file. Each deployment'"'"'s server block is in sites/, written by the swap on the host when it switches
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
    # No idle client connections: a reload (every swap'"'"'s switch) closes the idle keep-alive connections
    # of the old workers, and a client whose next request crosses that close gets a connection error
    # (measured: 3 of 922 requests failed across 300 reloads with keep-alive, 0 of 946 without). Each
    # request opens its own connection instead, which new workers accept.
    keepalive_timeout 0;
    client_max_body_size 64m;
    # Streamed answers (stream: true) reach the client token by token.
    proxy_buffering off;
    proxy_request_buffering off;
    proxy_http_version 1.1;
    proxy_connect_timeout 5s;
    proxy_read_timeout 3600s;
    proxy_send_timeout 3600s;
    # Each deployment'"'"'s accepted API keys (a map per deployment, 0600), written by its access step.
    include /etc/vllm-fleet/frontdoor/keys/*.conf;
    include /etc/vllm-fleet/frontdoor/sites/*.conf;
}'
readonly UNIT_FILE=/etc/systemd/system/vllm-fleet-frontdoor.service
# shellcheck disable=SC2016  # data, never expanded
readonly UNIT_TEXT='# Managed by vllm-fleet: the front door of this host'"'"'s vLLM deployments. `pulumi up` overwrites this file.
# Debian'"'"'s nginx with a configuration of its own; the distribution'"'"'s nginx.service is left as it was.
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
# QUIT is nginx'"'"'s graceful stop: requests in flight finish first.
KillSignal=SIGQUIT
KillMode=mixed
TimeoutStopSec=60
Restart=on-failure
RestartSec=2

[Install]
WantedBy=multi-user.target'
# <the body of host/steps/frontdoor.sh after line 1: 46 lines, 2154 bytes, sha256 f09d0eea39e5ae389fc6fd96c9cba105b6a6ceb8cfd1c1645cab9cef14a458b5>
