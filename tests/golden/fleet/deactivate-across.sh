#!/usr/bin/env bash
# vllm-fleet deactivate.sh: parameters rendered from the stack config
readonly STACK=fleet
readonly DEPLOYMENT=across
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across
readonly UNIT_NAME=vllm-across.service
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly FRONT_DOOR_DIR=/etc/vllm-fleet/frontdoor
readonly FRONT_DOOR_UNIT=vllm-fleet-frontdoor.service
readonly STAGING_PATH=''
# <the body of components/files/deactivate.sh after line 1: 60 lines, 2969 bytes, sha256 aebd337d368c48bf85ccde882da4f71b2de44e954a9e289b2f412a4ccfdfe218>
