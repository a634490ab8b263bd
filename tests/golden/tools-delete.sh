#!/usr/bin/env bash
# vllm-fleet tools-delete.sh: parameters rendered from the stack config
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
# <the body of render/templates/tools-delete.sh after line 1: 9 lines, 359 bytes, sha256 7cc8364a5d464aadb9f92076bf569bb6312ef8defcea496e2b9ba8a085269e44>
