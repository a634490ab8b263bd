#!/usr/bin/env bash
# vllm-fleet tools.sh: parameters rendered from the stack config
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly BUNDLE=vllm-fleet-host.pyz
readonly VERSION=<host package version>
readonly INCOMING=/usr/local/lib/vllm-fleet/.incoming/<host package version>.pyz
readonly UNPACK=<render/host_bundle.py's UNPACK: 15 lines, 886 bytes, sha256 fdbb69b739d25437870f78355247f71dff87751c3f94204755134addc7a7a73b>
LAUNCHERS=(adapters:host.adapters clean-shm:host.clean_shm gpu-release-guard:host.gpu_release_guard model-sync:host.model_sync node:host.node node-watch:host.node_watch prewarm:host.prewarm status:host.status survey:host.survey swap:host.swap vllm-args-check:host.vllm_args_check wait-ready:host.wait_ready)
readonly LAUNCHERS
# <the body of components/files/tools.sh after line 1: 35 lines, 1914 bytes, sha256 a952bdb9dc511f99839b1b222e0bd223728ae6639e97e1928399575a065fa650>
