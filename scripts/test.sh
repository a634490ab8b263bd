#!/usr/bin/env bash
# The test command of the README and CI: lint, types, then every test (unit, real engine, end to end).
# End-to-end tests bring the sandbox host and the mirror up themselves and take them down again if
# they started them.
#
# Two pytest runs at once, because the end-to-end tests spend most of their time waiting on engines
# that load and hosts that boot: the tests marked e2e (the sandbox hosts, one module after another) in
# the foreground, and the rest (unit, golden, real-engine previews, fresh clones; none touches a sandbox
# host or the shared mirror) beside them, their output shown once they are done. Arguments go to both
# runs; VLLM_FLEET_TEST_SERIAL=1 runs everything as one pytest instead.
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
cd "$VLLM_FLEET_ROOT"

echo "==> ruff"
"$VENV/ruff" check .
"$VENV/ruff" format --check .
if [ "${VLLM_FLEET_TEST_SERIAL:-}" = 1 ]; then
  echo "==> mypy"
  "$VENV/mypy" .
  echo "==> pytest"
  exec "$VENV/pytest" "$@"
fi

mkdir -p "$VLLM_FLEET_LOGS"
beside="$VLLM_FLEET_LOGS/pytest-not-e2e.log"
echo "==> mypy, then pytest -m 'not e2e' (beside the end-to-end tests; their output: $beside)"
# The end-to-end run is the long one and is bound by CPU: the run beside it yields the CPU to it (nice),
# and finishes well before it all the same. Without the cache plugin: two runs writing .pytest_cache at
# once would race.
(
  renice -n 5 -p "$BASHPID" >/dev/null
  "$VENV/mypy" . && exec "$VENV/pytest" -p no:cacheprovider -m "not e2e" "$@"
) >"$beside" 2>&1 &
beside_pid=$!
trap 'kill "$beside_pid" 2>/dev/null || true' EXIT
# The end-to-end module that asserts nothing about latency (faults: downloads, rollbacks, locks, a reboot)
# goes first, while the other run loads the CPU; the ones that count failed requests and gaps run after
# it has finished.
e2e_paths=()
if [ "$#" -eq 0 ]; then
  e2e_paths=(tests/test_faults.py)
  for path in tests/test_*.py; do [ "$path" = tests/test_faults.py ] || e2e_paths+=("$path"); done
fi
echo "==> pytest -m e2e"
set +e
# --durations: where the suite's time goes (make test is kept under 40 minutes on 2 cores).
"$VENV/pytest" -m e2e --durations=30 "${e2e_paths[@]}" "$@"
e2e_status=$?
wait "$beside_pid"
beside_status=$?
set -e
trap - EXIT
echo "==> mypy and pytest -m 'not e2e' (ran beside; exit $beside_status)"
cat "$beside"
# pytest exits 5 when a run selects no test (arguments that name only unit tests, say): that run is not a
# failure as long as the other one ran tests.
if { [ "$e2e_status" -eq 0 ] || [ "$e2e_status" -eq 5 ]; } && { [ "$beside_status" -eq 0 ] || [ "$beside_status" -eq 5 ]; } &&
  [ $((e2e_status + beside_status)) -lt 10 ]; then
  exit 0
fi
echo "==> pytest failed: e2e exit $e2e_status, not e2e exit $beside_status"
exit 1
