#!/usr/bin/env bash
# vllm-fleet deactivate.sh: parameters rendered from the stack config
readonly STACK=fleet
readonly DEPLOYMENT=chat-2
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.chat-2
readonly UNIT_NAME=vllm-tiny-chat-a.service
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
readonly STAGING_PATH=''
# <the body of host/steps/deactivate.sh after line 1: 62 lines, 3138 bytes, sha256 9a2c911e085c6182afd9b9c2502cc430ab3d5ce49b6fd30193d080c63ad7d19e>
