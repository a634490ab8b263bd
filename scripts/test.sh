#!/usr/bin/env bash
# The test command of the README and CI: lint, types, then every test (unit, real engine, end to end).
# End-to-end tests bring the sandbox host and the mirror up themselves and take them down again if
# they started them.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
cd "$VLLM_FLEET_ROOT"

echo "==> ruff"
"$VENV/ruff" check .
"$VENV/ruff" format --check .
echo "==> mypy"
"$VENV/mypy" .
echo "==> pytest"
exec "$VENV/pytest" "$@"
