#!/usr/bin/env bash
# vllm-fleet storage-delete.sh: parameters rendered from the stack config
readonly STORAGE_PATH=/shared
readonly HF_HOME_DIR=/shared/huggingface
readonly KEEP_LIST=/shared/.vllm-fleet-keep.fleet
# <the body of host/steps/storage-delete.sh after line 1: 7 lines, 378 bytes, sha256 23db2d0066fe7a9a0b441568292fa4c41174deb75dcba1930faf1768940a0220>
