#!/usr/bin/env bash
# vllm-fleet node-activate.sh: parameters rendered from the stack config
readonly STACK=fleet
readonly DEPLOYMENT=across.node1
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly UNIT_NAME=vllm-across-node1.service
readonly UNIT_STEM=vllm-across-node1
readonly GPUS=2
readonly GPUS_JSON='[2]'
readonly UNIT_SHA256=d4158694000dae36793f75ce43ccd811bfa09595b859de828b15f3724f9c32ad
# <the body of components/files/node-activate.sh after line 1: 60 lines, 2804 bytes, sha256 a0b37e2d24bd5136d50b92da032dba1da8048e547b1dd463a6475eba39804043>
