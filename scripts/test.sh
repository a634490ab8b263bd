#!/usr/bin/env bash
# The test command of the README and CI: lint, types, then every test (unit, real engine, end to end).
# The hosts and the mirror the end-to-end tests use are brought up (by this script, or with arguments by
# the tests' fixtures) and taken down again by whoever started them.
#
# pytest runs at once, because the end-to-end tests spend much of their time waiting on engines that load
# and hosts that boot: the tests marked e2e in the foreground (the single-host modules on the dev sandbox,
# one after another, and beside them the fleet lane on hosts of its own, below), and the rest (unit,
# golden, real-engine previews, fresh clones; none touches a sandbox host or the shared mirror) beside
# them, their output shown once they are done. Arguments go to the unit run and one end-to-end run;
# VLLM_FLEET_TEST_SERIAL=1 runs everything as one pytest instead.
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
# With no arguments the end-to-end tests run in two lanes, each on sandbox hosts of its own: an engine start
# is mostly Python importing vLLM on one core, so one lane alone left the second core idle 39% of the time
# (measured: /proc over the last 32 minutes of a run). The fleet lane runs beside the single-host modules
# on the dev sandbox: tests/test_fleet.py and tests/test_multinode.py on hosts fleet-1 and fleet-2, then
# tests/test_e2e.py and tests/test_access.py on fleet-1 (VLLM_FLEET_SANDBOX_NAME, which the single-host
# modules read), so that the two lanes end about together (measured: the single-host lane ended 3.7
# minutes after the fleet lane with test_access on it, which takes about 2). It starts once
# tests/test_faults.py is done: that module makes the shared mirror reset and corrupt downloads of the
# same repositories. The hosts and the mirror are brought up here and taken down at the end if this run
# started them.
fleet_modules=(tests/test_fleet.py tests/test_multinode.py)
on_fleet_1=(tests/test_e2e.py tests/test_access.py)
if [ "$#" -gt 0 ]; then
  echo "==> pytest -m e2e"
  set +e
  "$VENV/pytest" -m e2e --durations=30 "$@"
  e2e_status=$?
  fleet_status=5
else
  started_here=()
  for script in sandbox/host.sh scripts/mirror.sh; do
    if ! "$script" status >/dev/null 2>&1; then
      "$script" up
      started_here=("$script" "${started_here[@]}")
    fi
  done
  # shellcheck disable=SC2317  # run by the EXIT trap
  take_down() {
    kill "$beside_pid" "${fleet_pid:-}" 2>/dev/null || true
    [ -z "${fleet_started:-}" ] || sandbox/host.sh fleet-down || true
    for script in "${started_here[@]}"; do "$script" down || true; done
  }
  trap take_down EXIT
  single_host=()
  for path in tests/test_*.py; do
    case " tests/test_faults.py ${fleet_modules[*]} ${on_fleet_1[*]} " in *" $path "*) ;; *) single_host+=("$path") ;; esac
  done
  fleet_log="$VLLM_FLEET_LOGS/pytest-e2e-fleet-lane.log"
  echo "==> pytest -m e2e tests/test_faults.py"
  set +e
  "$VENV/pytest" -m e2e --durations=10 tests/test_faults.py
  faults_status=$?
  fleet_started=""
  for host in fleet-1 fleet-2; do
    VLLM_FLEET_SANDBOX_NAME=$host sandbox/host.sh status >/dev/null 2>&1 || fleet_started=1
  done
  echo "==> pytest -m e2e ${fleet_modules[*]}, then ${on_fleet_1[*]} on fleet-1 (beside the rest; their output: $fleet_log)"
  (
    [ -z "$fleet_started" ] || sandbox/host.sh fleet-up 2 || exit 1
    "$VENV/pytest" -p no:cacheprovider -m e2e --durations=15 "${fleet_modules[@]}"
    fleet_tests=$?
    VLLM_FLEET_SANDBOX_NAME=fleet-1 "$VENV/pytest" -p no:cacheprovider -m e2e --durations=10 "${on_fleet_1[@]}"
    moved_tests=$?
    exit $((fleet_tests != 0 && fleet_tests != 5 ? fleet_tests : moved_tests))
  ) >"$fleet_log" 2>&1 &
  fleet_pid=$!
  echo "==> pytest -m e2e (the single-host modules)"
  # --durations: where the suite's time goes (make test is kept under 40 minutes on 2 cores).
  "$VENV/pytest" -m e2e --durations=25 "${single_host[@]}"
  e2e_status=$?
  [ "$faults_status" -eq 0 ] || e2e_status=$faults_status
  wait "$fleet_pid"
  fleet_status=$?
  echo "==> pytest -m e2e ${fleet_modules[*]} ${on_fleet_1[*]} (ran beside; exit $fleet_status)"
  cat "$fleet_log"
fi
wait "$beside_pid"
beside_status=$?
set -e
echo "==> mypy and pytest -m 'not e2e' (ran beside; exit $beside_status)"
cat "$beside"
# pytest exits 5 when a run selects no test (arguments that name only unit tests, say): that run is not a
# failure as long as another one ran tests.
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
if ok "$e2e_status" && ok "$fleet_status" && ok "$beside_status" &&
  [ $((e2e_status + fleet_status + beside_status)) -lt 15 ]; then
  exit 0
fi
echo "==> pytest failed: e2e exit $e2e_status, fleet lane exit $fleet_status, not e2e exit $beside_status"
exit 1
