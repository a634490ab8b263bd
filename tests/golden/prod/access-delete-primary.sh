#!/usr/bin/env bash
# vllm-fleet access-delete.sh: parameters rendered from the stack config
readonly OWNER=prod.primary
readonly ACCESS_DIR=/etc/vllm-fleet/frontdoor/access/prod.primary
readonly KEYS_FILE=/etc/vllm-fleet/frontdoor/keys/prod.primary.conf
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
readonly SITE=/etc/vllm-fleet/frontdoor/sites/prod.primary.conf
# <the body of host/steps/access-delete.sh after line 1: 14 lines, 663 bytes, sha256 92572a80f3086c095d7ed1e7d950445fe32fac9e7e06d65ebe74b769b893c300>
