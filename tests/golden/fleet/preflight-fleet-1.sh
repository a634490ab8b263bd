#!/usr/bin/env bash
# vllm-fleet preflight.sh: parameters rendered from the stack config
readonly HOST_NAME=fleet-1
readonly PYTHON=/opt/vllm-env/bin/python3
readonly EXPECTED_GPUS=4
readonly EXPECTED_VLLM_VERSION=0.32.0
# <the body of components/files/preflight.sh after line 1: 58 lines, 3343 bytes, sha256 758478bb3ae68aab6b0ec6609abc2283c3c365b80fe4aaf5f89b7c4ae4c60216>
