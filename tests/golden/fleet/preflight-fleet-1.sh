#!/usr/bin/env bash
# vllm-fleet preflight.sh: parameters rendered from the stack config
readonly HOST_NAME=fleet-1
readonly PYTHON=/opt/vllm-env/bin/python3
readonly EXPECTED_GPUS=4
readonly EXPECTED_VLLM_VERSION=0.32.0
readonly STACK=fleet
readonly HOST_KEYS_DIR=/var/lib/vllm-fleet/host-keys
readonly PINNED_HOST_KEY=none
# <the body of render/templates/preflight.sh after line 1: 63 lines, 3710 bytes, sha256 4028f21b25db85140562bf494045937d0109dbf337cda3d888b6794f4ba01d1b>
