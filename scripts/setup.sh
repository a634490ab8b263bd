#!/usr/bin/env bash
# One idempotent set-up for a fresh machine: system packages, the Python venv, the real Pulumi engine
# (built from Go modules when no matching `pulumi` is installed), the local state backend and the dev
# stack. A second run with nothing changed only checks stamps.
set -euo pipefail
# shellcheck source=scripts/prelude.sh
source "$(dirname "$0")/prelude.sh"
# The dev stack lives on the local backend, whatever backend the shell chose for shared stacks.
export PULUMI_BACKEND_URL="$VLLM_FLEET_DEV_BACKEND_URL"

started=$(date +%s)
# Each step: one line on the terminal (a progress line while it runs), its output in this log, which a
# failure names.
LOG="$VLLM_FLEET_LOGS/setup.log"
mkdir -p "$(dirname "$LOG")"
: >"$LOG"

# System packages the tests and the sandbox need; apt runs only when one is missing.
packages=(shellcheck systemd systemd-container debootstrap socat iproute2 openssh-client zstd curl ca-certificates openssl)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  progress setup "apt-get update" "installing ${missing[*]}" "$LOG" apt-get update -qq
  progress setup "installing system packages: ${missing[*]}" "the Python venv" "$LOG" \
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# PostgreSQL for the shared-state tests (sandbox/postgres.py runs a throwaway cluster of its own): Debian's
# packages, told not to create their default cluster, so nothing of it runs as a service.
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || ! command -v psql >/dev/null; then
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/vllm-fleet-no-main-cluster.conf
  export DEBIAN_FRONTEND=noninteractive
  progress setup "apt-get update" "installing PostgreSQL" "$LOG" apt-get update -qq
  progress setup "installing PostgreSQL (binaries only: no default cluster, no service)" "the Python venv" "$LOG" \
    apt-get install -y -qq --no-install-recommends postgresql postgresql-client
fi

# Prometheus and promtool for the monitoring tests (tests/test_monitoring*.py run a Prometheus of their own
# on loopback): Debian's package, installed without starting or enabling the distribution's service.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  own_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    # invoke-rc.d asks this before starting a service: refuse prometheus's, allow everything else.
    # shellcheck disable=SC2016  # $1 is the policy script's own argument
    printf '#!/bin/sh\ncase "$1" in prometheus*) exit 101 ;; esac\nexit 0\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  progress setup "apt-get update" "installing Prometheus" "$LOG" apt-get update -qq
  progress setup "installing Prometheus (binaries only: its service is neither started nor enabled)" "the Python venv" \
    "$LOG" apt-get install -y -qq --no-install-recommends prometheus
  [ -z "$own_policy" ] || rm -f /usr/sbin/policy-rc.d
  systemctl disable prometheus.service >>"$LOG" 2>&1 || true
fi

# The sandbox's base image, for `make up` and `make test` (VLLM_FLEET_SETUP_SANDBOX=1): built beside the venv
# and the engine, since debootstrap and the vLLM wheelhouse wait on the network and the disk while the
# engine's compile keeps both CPUs busy (on a fresh 2-core machine ~4 of ~10 minutes). Its own log says
# what it does; `sandbox/host.sh up` finds it built (or waits on its lock).
sandbox_status=""
if [ "${VLLM_FLEET_SETUP_SANDBOX:-}" = 1 ]; then
  sandbox_status=$(mktemp)
  (
    rc=0
    sandbox/host.sh build >"$VLLM_FLEET_LOGS/sandbox-build-steps.log" 2>&1 </dev/null || rc=$?
    echo "$rc" >"$sandbox_status"
  ) &
fi

# The venv, keyed on the pins in pyproject.toml and the versions of everything they pull in (constraints.txt,
# written by `make lock`): a new machine installs what this one tested, not the newest of each on its day.
deps_hash=$(cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.deps-stamp 2>/dev/null)" != "$deps_hash" ]; then
  progress setup "creating .venv" "installing the pinned Python dependencies" "$LOG" python3 -m venv .venv
  .venv/bin/python scripts/requirements.py > .venv/requirements.txt
  progress setup "installing the pinned Python dependencies into .venv" "the Pulumi engine" "$LOG" \
    .venv/bin/pip install -q -r .venv/requirements.txt -c constraints.txt
  echo "$deps_hash" > .venv/.deps-stamp
fi
# The program's bytecode, written here because Python will not write it itself where the environment
# sets PYTHONDONTWRITEBYTECODE (this machine kind's image does): without it every `pulumi` run compiles the
# program's ~10,000 lines again, about 0.15 s per run of the program on 2 cores, and an `up` runs it twice.
# Timestamp-checked, so a module edited since is compiled afresh in memory (until the next set-up), never
# run stale. Only files changed since the last set-up are compiled.
.venv/bin/python -m compileall -q -j 0 --invalidation-mode timestamp components controller host models render \
  >>"$LOG" 2>&1

scripts/build-engine.sh

# The local backend (a folder in the repo) and the dev stack, encrypted with the dev passphrase.
mkdir -p .state
if ! pulumi stack ls --json 2>/dev/null | grep -q '"name": "dev"'; then
  progress setup "creating the dev stack on the local backend ($PULUMI_BACKEND_URL)" "" "$LOG" \
    pulumi stack init dev --secrets-provider passphrase --non-interactive
fi
if [ -n "$sandbox_status" ]; then
  # shellcheck disable=SC2016  # expanded by the waiting bash
  if ! progress setup "the sandbox image (built beside the engine: $VLLM_FLEET_LOGS/sandbox-build.log)" "" "$LOG" \
    bash -c 'while [ ! -s "$1" ]; do sleep 1; done; exit "$(cat "$1")"' _ "$sandbox_status"; then
    tail -n 25 "$VLLM_FLEET_LOGS/sandbox-build-steps.log" >&2
    echo "[setup] ERROR: the sandbox image did not build; its logs: $VLLM_FLEET_LOGS/sandbox-build-steps.log," \
      "$VLLM_FLEET_LOGS/sandbox-build.log" >&2
    exit 1
  fi
  rm -f "$sandbox_status"
fi
echo "==> setup: done in $(( $(date +%s) - started )) s"
