#!/usr/bin/env bash
# make lock: resolve pyproject.toml's pins afresh in a throwaway venv (their own dependencies at the newest
# versions that fit) and write every installed version into constraints.txt. make setup then installs
# exactly those on every machine, and make test says whether they work; commit constraints.txt with them.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
python3 scripts/requirements.py >"$tmp/requirements.txt"
echo "[lock] resolving pyproject.toml's pins afresh (pip install into a throwaway venv) ..."
"$tmp/venv/bin/pip" install -q --disable-pip-version-check -r "$tmp/requirements.txt"
{
  cat <<'HEADER'
# Every package of .venv at the version `make test` last passed with, direct and transitive: make setup
# installs pyproject.toml's pins under these constraints (`pip install -c`), so a new machine gets the
# same grpcio, protobuf, numpy... as this one, not whatever is newest on the day of its set-up.
# Written by `make lock` (scripts/lock.sh) after a pin in pyproject.toml changes; then make setup, make test.
HEADER
  "$tmp/venv/bin/pip" freeze --exclude-editable --disable-pip-version-check
} >constraints.txt.tmp
mv constraints.txt.tmp constraints.txt
echo "[lock] constraints.txt: $(grep -cv '^#' constraints.txt) packages; next: make setup && make test"
