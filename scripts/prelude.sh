#!/usr/bin/env bash
# Sourced first by the set-up scripts (make setup, make up, the mirror): the project's environment
# (scripts/env.sh), the one-line progress of long steps (scripts/progress.sh), and the repository root
# as the working directory.
# shellcheck source=scripts/env.sh
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=scripts/progress.sh
source "$(dirname "${BASH_SOURCE[0]}")/progress.sh"
cd "$VLLM_FLEET_ROOT" || exit 1
