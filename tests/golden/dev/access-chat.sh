#!/usr/bin/env bash
# vllm-fleet access.sh: parameters rendered from the stack config
readonly OWNER=dev.chat
readonly ACCESS_DIR=/etc/vllm-fleet/frontdoor/access/dev.chat
readonly KEYS_FILE=/etc/vllm-fleet/frontdoor/keys/dev.chat.conf
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
readonly SITE=/etc/vllm-fleet/frontdoor/sites/dev.chat.conf
readonly SEPARATOR=VLLM_FLEET_STDIN_PART
readonly SERVER_CONF='# Managed by vllm-fleet: address and TLS of deployment dev.chat.
listen 127.0.0.1:8000;
'
# shellcheck disable=SC2016  # data, never expanded
readonly API_CONF='# Managed by vllm-fleet: every /v1/ request of dev.chat carries an accepted key
# (the map in /etc/vllm-fleet/frontdoor/keys/dev.chat.conf; it accepts any request when the stack is open).
if ($vllm_fleet_key_cbd1a4c7f0fa71a7 = 0) {
    add_header WWW-Authenticate '"'"'Bearer realm="vllm-fleet"'"'"' always;
    return 401;
}
'
readonly METRICS_CONF='# Managed by vllm-fleet: who may read /metrics of dev.chat (access.metricsFrom).
allow 127.0.0.1/32;
deny all;
'
readonly CERTIFICATE=''
readonly SUMMARY='TLS off, /metrics from 127.0.0.1/32'
# <the body of host/steps/access.sh after line 1: 59 lines, 2978 bytes, sha256 513c1f43595ee7b364a13ba90f0a09f220b7b0366ac00c40e120ac5d8aa32121>
