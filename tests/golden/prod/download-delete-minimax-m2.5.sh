#!/usr/bin/env bash
# vllm-fleet download-delete.sh: parameters rendered from the stack config
readonly MODEL=minimax-m2.5
readonly MODEL_DIR=/shared/minimax-m2.5
readonly STORAGE_PATH=/shared
readonly KEEP_LIST=/shared/.vllm-fleet-keep.prod
# <the body of host/steps/download-delete.sh after line 1: 26 lines, 1185 bytes, sha256 b7aa42c3dd10dfb84980381d6489f8551610edf2fbba570c16309213dcdc626e>
