#!/usr/bin/env bash
# vllm-fleet node-activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly STAGED_SHA256=6daac27405e720c4bb0f36ea620e1c0074275f94ba02a73f087be6c7ef07eb33
# <the body of components/files/node-activate.sh after line 1: 10 lines, 781 bytes, sha256 8ad5f682fe908f17cfe807f19c76c3cd7c331896755101dcc605c1ff5c111c75>
