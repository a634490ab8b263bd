#!/usr/bin/env bash
# Brings the Pulumi engine this project runs on into .tools/ (git-ignored): the `pulumi` CLI, the Python
# language host and the pulumi-command provider, registered so the engine never tries to download one.
#
# Two paths, one script (docs/sandbox.md, "Installing the engine"):
#   * Offline (these machines, air-gapped clusters): from upstream source. The CLI comes from the Go module
#     proxy (github.com/pulumi/pulumi/pkg/v3, which it serves); the language host and pulumi-command come
#     from upstream source tarballs in $VLLM_FLEET_VENDOR_DIR (default: ../shared/vendor beside the
#     checkout), because the proxy refuses both projects' own modules. Each tarball is checked against
#     the folder's SHA256SUMS before anything is built from it.
#   * With internet: a `pulumi` of the right version already on PATH is used as it is (the official
#     installer puts pulumi-language-python beside it), and the provider comes from
#     `pulumi plugin install resource command v1.2.1` when there is no source folder.
#
# Idempotent: each binary has a stamp (its version, the source's sha256, the Go version); a run with
# nothing changed only checks stamps and `pulumi plugin ls`. One line per step on the terminal; the Go
# tool's full output goes to .tools/logs/build-engine.log, which an error names.
# Usage: scripts/build-engine.sh [--force]
set -euo pipefail
# shellcheck source=scripts/env.sh
source "$(dirname "$0")/env.sh"
# shellcheck source=scripts/progress.sh
source "$(dirname "$0")/progress.sh"

CLI_VERSION="${PULUMI_ENGINE_VERSION:-v3.274.1}"
LANGUAGE_HOST_VERSION=v3.259.0
COMMAND_VERSION=v1.2.1
VENDOR_DIR="$(realpath -m "${VLLM_FLEET_VENDOR_DIR:-$VLLM_FLEET_ROOT/../shared/vendor}")"
LANGUAGE_HOST_TARBALL="pulumi-language-python-${LANGUAGE_HOST_VERSION#v}-src.tar.gz"
COMMAND_TARBALL="pulumi-command-${COMMAND_VERSION#v}-src.tar.gz"
TOOLS="$VLLM_FLEET_ROOT/.tools"
BIN="$TOOLS/bin"
PROVIDER_BIN="$TOOLS/providers/pulumi-resource-command"
LOG_DIR="$TOOLS/logs"
LOG="$LOG_DIR/build-engine.log"
GO="${GO:-go}"
FORCE="${1:-}"

mkdir -p "$BIN" "$LOG_DIR" "$(dirname "$PROVIDER_BIN")"
: >"$LOG"
started=$SECONDS
say() { printf '[engine] %s\n' "$*" >&2; }
die() {
  printf '[engine] ERROR: %s\n' "$*" >&2
  exit 1
}
# quietly LABEL NEXT CMD...: run CMD with its output in the log and one progress line on the terminal
# (scripts/progress.sh); on failure the end of the log and its path.
quietly() { progress engine "$1" "$2" "$LOG" "${@:3}"; }
stamp_ok() { [[ "$FORCE" != --force && -x "$2" && "$(cat "$TOOLS/$1.stamp" 2>/dev/null)" == "$3" ]]; }
go_version() { "$GO" version 2>/dev/null || echo no-go; }
need_go() { command -v "$GO" >/dev/null || die "Go is needed to build $1 (apt-get install golang, or see docs/sandbox.md, \"Installing the engine\")"; }
ldflags() { printf '%s' "-s -w -X $1=$2"; }
SDK_VERSION_VAR=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version

# The sha256 of a vendored tarball, after checking it against SHA256SUMS; empty when there is no source folder.
vendored() {
  local tarball="$1"
  [[ -f "$VENDOR_DIR/$tarball" ]] || return 0
  [[ -f "$VENDOR_DIR/SHA256SUMS" ]] || die "$VENDOR_DIR has $tarball but no SHA256SUMS to check it against"
  local want have
  want="$(awk -v f="$tarball" '$2 == f || $2 == "*" f { print $1 }' "$VENDOR_DIR/SHA256SUMS")"
  [[ -n "$want" ]] || die "$VENDOR_DIR/SHA256SUMS does not list $tarball"
  have="$(sha256sum "$VENDOR_DIR/$tarball" | cut -d' ' -f1)"
  [[ "$have" == "$want" ]] || die "$VENDOR_DIR/$tarball has sha256 $have, SHA256SUMS says $want: refusing to build from it"
  printf '%s\n' "$have"
}

# The built binaries are also kept machine-wide in $VLLM_FLEET_CACHE/engine/<digest of the stamp> (the
# stamp names versions, source sha256 and Go version), so a second checkout on the machine (CI's fresh
# clone after a session) copies them instead of compiling for minutes.
ENGINE_CACHE="$VLLM_FLEET_CACHE/engine"
cache_dir() { printf '%s/%s' "$ENGINE_CACHE" "$(printf '%s' "$1" | sha256sum | cut -c1-24)"; }
# from_cache STAMP FILE...: copy FILEs (by name) from the cache entry of STAMP; false when it has none.
from_cache() {
  local dir file
  dir="$(cache_dir "$1")"
  shift
  for file in "$@"; do [[ -x "$dir/$(basename "$file")" ]] || return 1; done
  for file in "$@"; do install -m 0755 "$dir/$(basename "$file")" "$file"; done
}
# to_cache STAMP FILE...: keep FILEs in the cache entry of STAMP (written aside, then renamed: whole or absent).
to_cache() {
  local dir tmp
  dir="$(cache_dir "$1")"
  shift
  [[ -d "$dir" ]] && return 0
  mkdir -p "$ENGINE_CACHE"
  tmp="$(mktemp -d "$ENGINE_CACHE/.tmp.XXXXXX")"
  if ! { cp "$@" "$tmp/" && mv -T "$tmp" "$dir" 2>/dev/null; }; then rm -rf "$tmp"; fi  # another build won the race
}

module_dir() { # module_dir MODULE@VERSION: its folder in GOMODCACHE, downloaded if needed
  local dir
  dir="$("$GO" mod download -json "$1" 2>>"$LOG" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || die "the Go module proxy did not serve $1 (see $LOG)"
  printf '%s\n' "$dir"
}

work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# ---- 1. the CLI -------------------------------------------------------------------------------------
existing="$(PATH="${PATH//$BIN:/}" command -v pulumi || true)"
if [[ -n "$existing" && "$("$existing" version 2>/dev/null)" == "$CLI_VERSION" ]]; then
  ln -sf "$existing" "$BIN/pulumi"
  echo "installed $existing" >"$TOOLS/cli.stamp"
elif ! stamp_ok cli "$BIN/pulumi" "cli=$CLI_VERSION $(go_version)"; then
  if from_cache "cli=$CLI_VERSION $(go_version)" "$BIN/pulumi"; then
    say "the Pulumi CLI $CLI_VERSION from the machine's cache ($ENGINE_CACHE)"
  else
  need_go "the Pulumi CLI"
  say "building the Pulumi CLI $CLI_VERSION from the Go module proxy (a first build takes 5-10 minutes on 2 cores)"
  build_cli() {
    # pkg/v3's go.mod replaces the SDK with ../sdk: lay both out as in the monorepo.
    mkdir -p "$work/cli"
    cp -r "$(module_dir "github.com/pulumi/pulumi/pkg/v3@$CLI_VERSION")" "$work/cli/pkg"
    cp -r "$(module_dir "github.com/pulumi/pulumi/sdk/v3@$CLI_VERSION")" "$work/cli/sdk"
    chmod -R u+w "$work/cli"
    (cd "$work/cli/pkg" && "$GO" build -trimpath -ldflags "$(ldflags "$SDK_VERSION_VAR" "$CLI_VERSION")" \
      -o "$BIN/pulumi" ./cmd/pulumi)
  }
  quietly "pulumi CLI $CLI_VERSION: download and compile" "the Python language host" build_cli
  to_cache "cli=$CLI_VERSION $(go_version)" "$BIN/pulumi"
  fi
  echo "cli=$CLI_VERSION $(go_version)" >"$TOOLS/cli.stamp"
fi
[[ "$("$BIN/pulumi" version)" == "$CLI_VERSION" ]] || die "$BIN/pulumi reports $("$BIN/pulumi" version), expected $CLI_VERSION"
say "pulumi $CLI_VERSION ready"

# ---- 2. the Python language host --------------------------------------------------------------------
host_sha="$(vendored "$LANGUAGE_HOST_TARBALL")"
existing_host="$(dirname "$existing")/pulumi-language-python"
if [[ -z "$host_sha" && -n "$existing" && -x "$existing_host" ]]; then
  ln -sf "$existing_host" "$BIN/pulumi-language-python"
  ln -sf "$existing_host-exec" "$BIN/pulumi-language-python-exec"
elif [[ -z "$host_sha" ]]; then
  die "no Python language host: put $LANGUAGE_HOST_TARBALL in $VENDOR_DIR (or set VLLM_FLEET_VENDOR_DIR), or install Pulumi $CLI_VERSION with its official installer so pulumi-language-python is beside pulumi"
elif ! stamp_ok language-host "$BIN/pulumi-language-python" "host=$LANGUAGE_HOST_VERSION sha=$host_sha cli=$CLI_VERSION $(go_version)"; then
  if from_cache "host=$LANGUAGE_HOST_VERSION sha=$host_sha cli=$CLI_VERSION $(go_version)" \
    "$BIN/pulumi-language-python" "$BIN/pulumi-language-python-exec"; then
    say "the Python language host $LANGUAGE_HOST_VERSION from the machine's cache ($ENGINE_CACHE)"
  else
  need_go "the Python language host"
  build_host() {
    tar -xzf "$VENDOR_DIR/$LANGUAGE_HOST_TARBALL" -C "$work"
    local src="$work/pulumi-language-python-${LANGUAGE_HOST_VERSION#v}/sdk/python"
    # Its go.mod points pkg/v3 and sdk/v3 at sibling folders of the monorepo, which the tarball does not
    # carry: use the released modules of the CLI's version instead (it compiles against them unchanged).
    (cd "$src/cmd/pulumi-language-python" &&
      "$GO" mod edit -dropreplace github.com/pulumi/pulumi/pkg/v3 -dropreplace github.com/pulumi/pulumi/sdk/v3 \
        -require "github.com/pulumi/pulumi/pkg/v3@$CLI_VERSION" -require "github.com/pulumi/pulumi/sdk/v3@$CLI_VERSION" &&
      "$GO" mod tidy &&
      "$GO" build -trimpath -ldflags "$(ldflags "$SDK_VERSION_VAR" "$LANGUAGE_HOST_VERSION")" \
        -o "$BIN/pulumi-language-python" .)
    install -m 0755 "$src/cmd/pulumi-language-python-exec" "$BIN/pulumi-language-python-exec"
  }
  quietly "python language host $LANGUAGE_HOST_VERSION: compile from $VENDOR_DIR/$LANGUAGE_HOST_TARBALL" \
    "the pulumi-command provider" build_host
  to_cache "host=$LANGUAGE_HOST_VERSION sha=$host_sha cli=$CLI_VERSION $(go_version)" \
    "$BIN/pulumi-language-python" "$BIN/pulumi-language-python-exec"
  fi
  echo "host=$LANGUAGE_HOST_VERSION sha=$host_sha cli=$CLI_VERSION $(go_version)" >"$TOOLS/language-host.stamp"
fi
# The dynamic-provider helper of the old engine is no longer used by anything.
rm -f "$BIN/pulumi-resource-pulumi-python"
say "pulumi-language-python $("$BIN/pulumi-language-python" -version 2>/dev/null || echo '?') ready"

# ---- 3. the pulumi-command provider, registered in PULUMI_HOME --------------------------------------
command_sha="$(vendored "$COMMAND_TARBALL")"
if [[ -n "$command_sha" ]] &&
  ! stamp_ok command-provider "$PROVIDER_BIN" "command=$COMMAND_VERSION sha=$command_sha $(go_version)"; then
  if from_cache "command=$COMMAND_VERSION sha=$command_sha $(go_version)" "$PROVIDER_BIN"; then
    say "pulumi-command $COMMAND_VERSION from the machine's cache ($ENGINE_CACHE)"
  else
  need_go "the pulumi-command provider"
  build_provider() {
    tar -xzf "$VENDOR_DIR/$COMMAND_TARBALL" -C "$work"
    (cd "$work/pulumi-command-${COMMAND_VERSION#v}/provider" &&
      CGO_ENABLED=0 "$GO" build -trimpath \
        -ldflags "$(ldflags github.com/pulumi/pulumi-command/provider/pkg/version.Version "$COMMAND_VERSION")" \
        -o "$PROVIDER_BIN" ./cmd/pulumi-resource-command)
  }
  quietly "pulumi-command $COMMAND_VERSION: compile from $VENDOR_DIR/$COMMAND_TARBALL" \
    "registering it with the engine" build_provider
  to_cache "command=$COMMAND_VERSION sha=$command_sha $(go_version)" "$PROVIDER_BIN"
  fi
  echo "command=$COMMAND_VERSION sha=$command_sha $(go_version)" >"$TOOLS/command-provider.stamp"
  rm -rf "$PULUMI_HOME/plugins/resource-command-$COMMAND_VERSION"* # re-register the new build
fi
if ! pulumi plugin ls 2>/dev/null | grep -Eq "^command[[:space:]]+resource[[:space:]]+${COMMAND_VERSION#v}\b"; then
  if [[ -n "$command_sha" ]]; then
    quietly "registering pulumi-command $COMMAND_VERSION" "" \
      pulumi plugin install resource command "$COMMAND_VERSION" --file "$PROVIDER_BIN"
  else
    # No source folder: a machine with internet access gets the released provider.
    quietly "installing pulumi-command $COMMAND_VERSION (download)" "" \
      env PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=false pulumi plugin install resource command "$COMMAND_VERSION"
  fi
fi
say "engine ready in $((SECONDS - started)) s: pulumi $CLI_VERSION, pulumi-language-python $LANGUAGE_HOST_VERSION, pulumi-command $COMMAND_VERSION"
