#!/usr/bin/env bash
# vllm-fleet node-activate.sh: parameters rendered from the stack config
readonly STATE_DIR=/var/lib/vllm-fleet/deployments/fleet.across.node1
readonly PYTHON=/opt/vllm-env/bin/python3
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly STAGED_SHA256=571d9e691e43e8f10ce43de43a7d225ca3e4d9c8f23c2cb9914ae1a907c73f70
# <the body of host/steps/node-activate.sh after line 1: 10 lines, 787 bytes, sha256 2d922f93c3a5042e80124cef7bdae7ed962e822557aade744209529072b218ab>
