#!/usr/bin/env bash
# vllm-fleet tools.sh: parameters rendered from the stack config
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly BUNDLE=vllm-fleet-host.pyz
readonly VERSION=<host package version>
readonly INCOMING=/usr/local/lib/vllm-fleet/.incoming/<host package version>.pyz
# shellcheck disable=SC2016  # data, never expanded
readonly UNPACK=<render/host_bundle.py's UNPACK: 17 lines, 1000 bytes, sha256 8ef991bedb564c74350f19c207b0d9a23d1a5614f7a5b90aaa6936e153edfb23>
LAUNCHERS=(adapters:host.adapters clean-shm:host.clean_shm gpu-release-guard:host.gpu_release_guard model-sync:host.model_sync node:host.node node-watch:host.node_watch prewarm:host.prewarm status:host.status step:host.step survey:host.survey swap:host.swap vllm-args-check:host.vllm_args_check wait-ready:host.wait_ready)
readonly LAUNCHERS
# <the body of components/files/tools.sh after line 1: 36 lines, 2062 bytes, sha256 681405b0f6681b4880c1a9c4cbad6c53ab940613d880240464ddfe6b3ceec81f>
