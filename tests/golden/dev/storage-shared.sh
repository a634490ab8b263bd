#!/usr/bin/env bash
# vllm-fleet storage.sh: parameters rendered from the stack config
readonly STORAGE_PATH=/shared
readonly HF_HOME_DIR=/shared/huggingface
readonly OWNER=root
KEEP_DIRS=(tiny-chat-a)
readonly KEEP_DIRS
readonly KEEP_LIST=/shared/.vllm-fleet-keep.dev
# <the body of host/steps/storage.sh after line 1: 13 lines, 811 bytes, sha256 a503824c0a270c022abd5633fb8451c2c4fc148363148306b03941143151fa5e>
