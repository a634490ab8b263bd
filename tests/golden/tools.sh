#!/usr/bin/env bash
# vllm-fleet tools.sh: parameters rendered from the stack config
# shellcheck disable=SC2016  # data, never expanded
readonly ARCHIVE_URN='urn:pulumi:dev::vllm-fleet::vllm-fleet:index:GpuHost$command:remote:CopyToRemote::sandbox-tools-archive'
readonly TOOLS_DIR=/usr/local/lib/vllm-fleet
readonly BUNDLE=vllm-fleet-host.pyz
readonly VERSION=<host package version>
readonly INCOMING=/usr/local/lib/vllm-fleet/.incoming/<host package version>.pyz
# shellcheck disable=SC2016  # data, never expanded
readonly UNPACK=<render/host_bundle.py's UNPACK: 17 lines, 1000 bytes, sha256 8ef991bedb564c74350f19c207b0d9a23d1a5614f7a5b90aaa6936e153edfb23>
LAUNCHERS=(adapters:host.tools.adapters clean-shm:host.tools.clean_shm gpu-release-guard:host.tools.gpu_release_guard model-sync:host.tools.model_sync node:host.tools.node node-watch:host.tools.node_watch prewarm:host.tools.prewarm status:host.tools.status step:host.tools.step survey:host.tools.survey swap:host.tools.swap vllm-args-check:host.tools.vllm_args_check wait-ready:host.tools.wait_ready)
readonly LAUNCHERS
# <the body of render/templates/tools.sh after line 1: 36 lines, 2082 bytes, sha256 a7a4f5df6b70067f1e14bc74c724c96c801a8a554002bfa4dc1246ae60fc0fe0>
