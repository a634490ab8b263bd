#!/usr/bin/env bash
# vllm-fleet stage-delete.sh: parameters rendered from the stack config
readonly DEPLOYMENT=across.node1
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
# <the body of host/steps/stage-delete.sh after line 1: 6 lines, 218 bytes, sha256 3966a0b614fd7fcf3db3918b0e81d1586230094d706fa9145de8aab2b2f3cc20>
