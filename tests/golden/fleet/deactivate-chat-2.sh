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
# <the body of components/files/deactivate.sh after line 1: 49 lines, 2284 bytes, sha256 d2b3be2b91b9210c72c06c4c740068ef6b2d6758f8e0366a00d98f51af2e9b22>
