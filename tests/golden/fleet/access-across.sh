#!/usr/bin/env bash
# vllm-fleet access.sh: parameters rendered from the stack config
readonly OWNER=fleet.across
readonly ACCESS_DIR=/etc/vllm-fleet/frontdoor/access/fleet.across
readonly KEYS_FILE=/etc/vllm-fleet/frontdoor/keys/fleet.across.conf
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
readonly SITE=/etc/vllm-fleet/frontdoor/sites/fleet.across.conf
readonly SEPARATOR=VLLM_FLEET_STDIN_PART
readonly SERVER_CONF='# Managed by vllm-fleet: address and TLS of deployment fleet.across.
listen 127.0.0.1:8002;
'
# shellcheck disable=SC2016  # data, never expanded
readonly API_CONF='# Managed by vllm-fleet: every /v1/ request of fleet.across carries an accepted key
# (the map in /etc/vllm-fleet/frontdoor/keys/fleet.across.conf; it accepts any request when the stack is open).
if ($vllm_fleet_key_e9e022ce37a4be3c = 0) {
    add_header WWW-Authenticate '"'"'Bearer realm="vllm-fleet"'"'"' always;
    return 401;
}
'
readonly METRICS_CONF='# Managed by vllm-fleet: who may read /metrics of fleet.across (access.metricsFrom).
deny all;
'
readonly CERTIFICATE=''
readonly SUMMARY='TLS off, /metrics from nobody'
# <the body of host/steps/access.sh after line 1: 59 lines, 2978 bytes, sha256 513c1f43595ee7b364a13ba90f0a09f220b7b0366ac00c40e120ac5d8aa32121>
