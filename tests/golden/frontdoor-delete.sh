#!/usr/bin/env bash
# vllm-fleet frontdoor-delete.sh: parameters rendered from the stack config
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
# <the body of host/steps/frontdoor-delete.sh after line 1: 14 lines, 686 bytes, sha256 919c8cf2ea5ff441e0fb3b36f8d66435dca3be85bc455ea1fb05e95f18cdad9a>
