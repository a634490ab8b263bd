#!/usr/bin/env bash
# vllm-fleet stage-delete.sh: parameters rendered from the stack config
readonly DEPLOYMENT=chat
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/dev.chat
# <the body of host/steps/stage-delete.sh after line 1: 6 lines, 218 bytes, sha256 3966a0b614fd7fcf3db3918b0e81d1586230094d706fa9145de8aab2b2f3cc20>
