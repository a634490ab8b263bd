#!/usr/bin/env bash
# sandbox/host.sh: a throwaway Debian bookworm host with real systemd (systemd-nspawn --boot), reachable
# over SSH on 127.0.0.1, for deploying vllm-fleet against something that behaves like a GPU server.
#
#   build             debootstrap + configure the cached base root ($VLLM_FLEET_CACHE/sandbox/base-*/root)
#   up                build if needed, boot it (overlay on the base, own netns), forward ports, wait for ssh
#   down              power off, stop our processes, unmount, delete the netns and the run state
#   status            exit 0 when up and ssh works, 1 when up but ssh fails, 3 when down
#   wait              wait (bounded) until ssh works and systemd reports running, e.g. after a reboot
#   ssh [cmd...]      ssh root@127.0.0.1 -p $VLLM_FLEET_SANDBOX_SSH_PORT into it (stdin is passed through)
#   exec [cmd...]     run a command inside with nsenter (no ssh involved)
#   fleet-up [N]      bring up N more hosts (default 2), fleet-1..N, each like `up` with its own name
#   fleet-down        take every fleet host down
#
# VLLM_FLEET_SANDBOX_NAME picks the host the other subcommands act on: "sandbox" (the default, the dev
# stack's host) or fleet-N. Each host has its own netns, state dir (.sandbox, .sandbox-fleet-N), ssh
# port on loopback (2222; 2230+N) and API ports (18000/18001 -> 8000/8001; 18000+100N, 18001+100N), and
# an address on the fabric, a bridge in netns vllmfleet-fabric that joins the hosts as a switch joins
# servers (10.77.0.10 for sandbox, 10.77.0.10+N for fleet-N, interface fabric0, names vllm-fleet-N in
# every host's /etc/hosts). One client key (.sandbox/ssh/id_ed25519) logs in to all of them.
#
# Design (see REFERENCE.md 2, "A throwaway host with real systemd"):
#   * The base root $VLLM_FLEET_CACHE/sandbox/base-<flavour>-<key>/root is built once per key (hash of the build
#     section of this script, nvidia-smi-standin and, for flavour "vllm", install-vllm.sh, vllm-requirements.txt,
#     vllm-wheelhouse.sh and vllm-env.sh, which both source) in a temp dir and renamed into place, under a lock, in the machine-wide cache of
#     scripts/env.sh (/var/cache/vllm-fleet for root): every checkout on the machine shares it. The plain
#     debootstrap result is cached too, as a tarball. Flavour "plain" (no vLLM): VLLM_FLEET_SANDBOX_SKIP_VLLM=1
#     or no install-vllm.sh.
#   * The ssh key pair .sandbox/ssh/id_ed25519 survives `down`; known_hosts and ssh config are rewritten.
#   * Each host has SSH host keys of its own (ed25519, ECDSA, RSA), made at its first `up` into
#     .sandbox[-fleet-N]/ssh/host-keys and kept across `down`, as each server of a fleet has its own: never
#     the base image's, which every sandbox host would share. Its ssh/known_hosts lists them as
#     `ssh-keyscan` would print them ([127.0.0.1]:PORT), the file the fleet tests' known_hosts is made of.
#   * `up` mounts overlayfs (lower = base, upper/work in .sandbox/overlay) at .sandbox/root, so `down`
#     discards every change and the base stays pristine (falls back to a full copy if overlay fails).
#   * The container gets network namespace vllmfleet-sbx with only loopback. Ports are relayed by socat
#     pairs that meet on unix sockets in .sandbox/sock (a path socket works across network namespaces);
#     they run outside the container, so they survive its reboots:
#       root ns 127.0.0.1:SSH_PORT      -> sandbox 127.0.0.1:22
#       root ns 127.0.0.1:HOST_PORT     -> sandbox 127.0.0.1:PORT   for each HOST_PORT:PORT in API_PORTS
#       sandbox 127.0.0.1:MIRROR_PORT   -> root ns 127.0.0.1:MIRROR_PORT (the Hugging Face mirror)
#   * A supervisor (this script, `_supervise`) runs systemd-nspawn and boots it again when it exits 133
#     (`systemctl reboot` inside); any other exit ends it.
#   * Only processes whose pids we wrote to .sandbox/pids are ever signalled, after checking they are ours.
# shellcheck disable=SC2317  # stage_* run through `timed`, *_failed through traps: reached indirectly
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=../scripts/env.sh disable=SC1091
source "$HERE/../scripts/env.sh"
# shellcheck source-path=SCRIPTDIR source=../scripts/progress.sh disable=SC1091
source "$HERE/../scripts/progress.sh"

SELF="$VLLM_FLEET_ROOT/sandbox/host.sh"
INSTANCE="${VLLM_FLEET_SANDBOX_NAME:-sandbox}"
FABRIC_NETNS=vllmfleet-fabric
FABRIC_IF=fabric0
FABRIC_NET=10.77.0
FLEET_MAX=8
case "$INSTANCE" in
  sandbox)
    INDEX=0 MACHINE=vllm-sandbox NETNS=vllmfleet-sbx STATE="$VLLM_FLEET_ROOT/.sandbox" DEFAULT_SSH_PORT=2222
    ;;
  fleet-[1-8])
    INDEX="${INSTANCE#fleet-}" MACHINE="vllm-$INSTANCE" NETNS="vllmfleet-f${INSTANCE#fleet-}"
    STATE="$VLLM_FLEET_ROOT/.sandbox-$INSTANCE" DEFAULT_SSH_PORT=$((2230 + ${INSTANCE#fleet-}))
    ;;
  *)
    printf '[sandbox] ERROR: VLLM_FLEET_SANDBOX_NAME=%s: use "sandbox" or fleet-1 ... fleet-%s\n' "$INSTANCE" "$FLEET_MAX" >&2
    exit 2
    ;;
esac
FABRIC_ADDRESS="$FABRIC_NET.$((10 + INDEX))"
# The loopback address this host's requests reach the mirror from (sandbox/sandbox_env.MIRROR_CLIENT).
MIRROR_CLIENT="127.0.0.$((10 + INDEX))"
SSH_PORT="${VLLM_FLEET_SANDBOX_SSH_PORT:-$DEFAULT_SSH_PORT}"
MIRROR_PORT="${VLLM_FLEET_MIRROR_PORT:-18080}"
# HOST_PORT:SANDBOX_PORT pairs: the vLLM API ports of up to two deployments.
read -r -a API_PORTS <<<"${VLLM_FLEET_SANDBOX_API_PORTS:-$((18000 + 100 * INDEX)):8000 $((18001 + 100 * INDEX)):8001}"
BOOT_TIMEOUT="${VLLM_FLEET_SANDBOX_BOOT_TIMEOUT:-180}"
STOP_TIMEOUT="${VLLM_FLEET_SANDBOX_STOP_TIMEOUT:-30}"
# Extra systemd-nspawn arguments, word-split (e.g. "--bind-ro=/srv/models:/shared/models").
read -r -a NSPAWN_EXTRA <<<"${VLLM_FLEET_SANDBOX_NSPAWN_ARGS:-}"

SUITE=bookworm
# The Debian mirror the base image is built from: VLLM_FLEET_DEBIAN_MIRROR, else the one this machine's
# apt already uses (its first deb source of a release suite, not -updates or -security), else deb.debian.org.
apt_debian_mirror() { # apt_debian_mirror [ROOT]: read ROOT/etc/apt (tests give another root)
  local f found="" root="${1%/}"
  for f in "$root"/etc/apt/sources.list.d/*.sources; do
    [[ -f "$f" && -z "$found" ]] || continue
    found="$(awk 'BEGIN { RS = ""; FS = "\n" }
      { types = uris = suites = ""; off = 0
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^Types:/) types = $i " "
          else if ($i ~ /^URIs:/) uris = $i
          else if ($i ~ /^Suites:/) suites = $i " "
          else if ($i ~ /^Enabled:[[:space:]]*no/) off = 1
        }
        if (!off && types ~ /[[:space:]]deb[[:space:]]/ && suites ~ /[[:space:]][a-z]+[[:space:]]/) {
          split(uris, u, /[[:space:]]+/); print u[2]; exit
        } }' "$f")"
  done
  for f in "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/*.list; do
    [[ -f "$f" && -z "$found" ]] || continue
    found="$(awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
      if ($(i + 1) ~ /^[a-z]+$/) { print $i; exit } }' "$f")"
  done
  printf '%s\n' "${found%/}"
}
DEBIAN_MIRROR="${VLLM_FLEET_DEBIAN_MIRROR:-$(apt_debian_mirror /)}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
INCLUDE="systemd,systemd-sysv,dbus,libpam-systemd,dbus-user-session,openssh-server,python3,python3-venv,curl,iproute2,ca-certificates,sudo,nginx"
# Four stand-in GPUs: 0 and 1 for the dev stack (`make up`), whose swaps alternate between them, and
# 2 and 3 for the end-to-end tests, so `make test` runs beside a deployed dev stack.
GPUS_JSON='{
  "_comment": "GPUs the nvidia-smi stand-in pretends to have (vllm-fleet sandbox; there is no real GPU).",
  "count": 4,
  "name": "Sandbox Stand-in GPU",
  "memory_total_mib": 16384,
  "driver_version": "580.159.04",
  "cuda_version": "13.0",
  "compute_cap": "9.0"
}'

# Machine-wide, shared by every checkout: the base images (by content key) and the debootstrap tarball.
CACHE="$VLLM_FLEET_CACHE/sandbox"
# This checkout's own: the lock of its hosts' lifecycle and the last console log.
LOCAL_CACHE="$VLLM_FLEET_ROOT/.cache/sandbox"
ROOT="$STATE/root"
PIDS="$STATE/pids"
SOCK="$STATE/sock"
SSH_DIR="$STATE/ssh"
# The client key is the same for every sandbox host, as one operator's key is on a fleet.
KEY_DIR="$VLLM_FLEET_ROOT/.sandbox/ssh"
KEY="$KEY_DIR/id_ed25519"
KNOWN_HOSTS="$SSH_DIR/known_hosts"
HOST_KEY_DIR="$SSH_DIR/host-keys"
LOG="$STATE/nspawn.log"
# What the steps print, beyond their one line each (scripts/progress.sh): the build's (shared by the
# hosts of this checkout, which build one after the other) and this host's `up`.
BUILD_LOG="$VLLM_FLEET_LOGS/sandbox-build.log"
UP_LOG="$VLLM_FLEET_LOGS/$INSTANCE-up.log"
NETNS_PATH="/run/netns/$NETNS"
export LC_NUMERIC=C

# ------------------------------------------------------------------------------------------ helpers

say() { printf '[sandbox] %s\n' "$*"; }
warn() { printf '[sandbox] WARNING: %s\n' "$*" >&2; }
die() {
  printf '[sandbox] ERROR: %s\n' "$*" >&2
  exit 1
}
# up and down start the same way: as root, with the caches there, holding this host's lifecycle lock
# (fd 9, held until the script ends), so that the two never overlap.
lifecycle_start() {
  need_root
  mkdir -p "$CACHE" "$LOCAL_CACHE"
  exec 9>"$LOCAL_CACHE/.lifecycle.lock"
  flock 9
}
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }

# The build's stages in the order build runs them, so each progress line can say what comes next.
BUILD_STAGES=("debootstrap" "system config" "openssh-server" "CA certificates" "nvidia-smi stand-in"
  "vLLM wheelhouse (sandbox/vllm-wheelhouse.sh)" "vLLM (sandbox/install-vllm.sh)")
# timed LABEL CMD...: run CMD with its output in the build log; one line says what it is, how long it
# took and what comes next (a progress line while it runs, on a terminal).
timed() {
  local label="$1" next="" i
  shift
  for i in "${!BUILD_STAGES[@]}"; do
    [[ "${BUILD_STAGES[i]}" == "$label" ]] && next="${BUILD_STAGES[i + 1]:-}"
  done
  progress sandbox "$label" "$next" "$BUILD_LOG" "$@"
}

need_root() { [[ $EUID -eq 0 ]] || die "must run as root (debootstrap, mount, ip netns, systemd-nspawn)"; }

ensure_host_packages() {
  local -A want=([systemd-nspawn]=systemd-container [debootstrap]=debootstrap [socat]=socat [ip]=iproute2
    [ss]=iproute2 [ssh]=openssh-client [ssh-keygen]=openssh-client [zstd]=zstd [nsenter]=util-linux
    [flock]=util-linux [findmnt]=util-linux [ps]=procps [chroot]=coreutils)
  local cmd pkgs=()
  for cmd in "${!want[@]}"; do
    command -v "$cmd" >/dev/null 2>&1 || pkgs+=("${want[$cmd]}")
  done
  ((${#pkgs[@]})) || return 0
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  # An update that reports errors (one unreachable source) need not stop the install.
  progress sandbox "apt-get update" "installing ${pkgs[*]}" "$UP_LOG" bash -c 'apt-get update -qq || true'
  progress sandbox "installing host packages: ${pkgs[*]}" "" "$UP_LOG" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}"
}

# vLLM goes in unless VLLM_FLEET_SANDBOX_SKIP_VLLM=1 (or there is no install-vllm.sh yet); the two kinds
# of image are cached side by side ("vllm" / "plain"), so switching does not throw the other away.
flavor() {
  if [[ -z "${VLLM_FLEET_SANDBOX_SKIP_VLLM:-}" && -f "$VLLM_FLEET_ROOT/sandbox/install-vllm.sh" ]]; then
    echo vllm
  else
    echo plain
  fi
}

# The key of the base image: the files that decide its content (those of the vLLM install only for that
# flavour; the wheelhouse itself is pinned by hashes in vllm-requirements.txt).
# Of this script, only its build section and the variables it reads go in: what starts, links and stops
# hosts can change without rebuilding the image.
build_key() {
  local files=(sandbox/nvidia-smi-standin) f
  [[ "$(flavor)" == plain ]] || files+=(sandbox/install-vllm.sh sandbox/vllm-requirements.txt sandbox/vllm-wheelhouse.sh sandbox/vllm-env.sh)
  (
    cd "$VLLM_FLEET_ROOT"
    sed -n '/^# -* build$/,/^# -* processes$/p' sandbox/host.sh | sha256sum
    printf '%s\n' "$SUITE" "$INCLUDE" "$GPUS_JSON"
    for f in "${files[@]}"; do
      if [[ -f "$f" ]]; then sha256sum "$f"; else echo "absent $f"; fi
    done
    echo "${VLLM_FLEET_SANDBOX_BUILD_SALT:-}"
  ) | sha256sum | cut -c1-16
}

debootstrap_key() {
  printf '%s\n' "$SUITE" minbase "$INCLUDE" "$DEBIAN_MIRROR" "$(debootstrap --version)" | sha256sum | cut -c1-16
}

base_dir() { printf '%s/base-%s-%s' "$CACHE" "$(flavor)" "$(build_key)"; }

# The lower directories of the overlays mounted on this machine: the base images sandboxes (of any
# checkout) run on now.
# findmnt exits 1 when nothing is mounted (a fresh machine): that is an empty list, not a failure.
mounted_lowers() { { findmnt -rn -t overlay -o OPTIONS || true; } | tr ',' '\n' | sed -n 's/^lowerdir=//p'; }

in_root() { # in_root ROOTDIR CMD...: run CMD chrooted, with a clean environment
  local root="$1"
  shift
  chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

mounts_under() { findmnt -rn -o TARGET | awk -v p="$1/" 'index($0 "/", p) == 1'; }

rm_tree() { # never crosses into a mount (a stray bind mount of /dev must not be emptied)
  [[ -e "$1" ]] || return 0
  if [[ -n "$(mounts_under "$1")" ]]; then
    die "refusing to delete $1: it has mounts under it: $(mounts_under "$1" | tr '\n' ' ')"
  fi
  rm -rf --one-file-system "$1"
}

# ------------------------------------------------------------------------------------------ build

stage_debootstrap() { # $1 = root dir to fill
  local root="$1" tarball tmp
  tarball="$CACHE/debootstrap-$(debootstrap_key).tar.zst"
  if [[ -f "$tarball" ]]; then
    say "  restoring cached debootstrap root $(basename "$tarball")"
    mkdir -p "$root"
    tar --numeric-owner --xattrs --xattrs-include='*' -I zstd -xpf "$tarball" -C "$root"
    return
  fi
  say "  debootstrap --variant=minbase $SUITE from $DEBIAN_MIRROR (include: $INCLUDE)"
  debootstrap --variant=minbase --include="$INCLUDE" "$SUITE" "$root" "$DEBIAN_MIRROR" \
    >"$CACHE/debootstrap.log" 2>&1 || {
    tail -n 30 "$CACHE/debootstrap.log" >&2
    die "debootstrap failed (log: $CACHE/debootstrap.log)"
  }
  [[ -z "$(mounts_under "$root")" ]] || die "debootstrap left mounts under $root"
  rm -f "$root"/var/cache/apt/archives/*.deb
  tmp="$(mktemp "$CACHE/.tmp-debootstrap.XXXXXX")"
  tar --numeric-owner --xattrs --xattrs-include='*' -I 'zstd -T0 -3' -cf "$tmp" -C "$root" .
  mv -f "$tmp" "$tarball"
  say "  cached the debootstrap root as $(basename "$tarball") ($(du -h "$tarball" | cut -f1))"
}

stage_system() {
  local root="$1"
  # A fresh machine id on every boot (systemd fills the empty file), shared with dbus.
  : >"$root/etc/machine-id"
  mkdir -p "$root/var/lib/dbus"
  ln -sfn /etc/machine-id "$root/var/lib/dbus/machine-id"
  # Each host's own name and the fabric's names are written by `up` (the image serves every host).
  echo vllm-sandbox >"$root/etc/hostname"
  # Units that have nothing to do in a container on a console nobody reads.
  local unit
  for unit in console-getty.service getty@tty1.service systemd-firstboot.service; do
    ln -sfn /dev/null "$root/etc/systemd/system/$unit"
  done
  # Debian's nginx is here for the front door (vllm-fleet-frontdoor.service runs it with its own config);
  # the distribution's nginx.service and its default site stay off, as on a server that never used them.
  rm -f "$root/etc/systemd/system/multi-user.target.wants/nginx.service"
  mkdir -p "$root/etc/vllm-fleet-sandbox"
  printf '%s\n' "$GPUS_JSON" >"$root/etc/vllm-fleet-sandbox/gpus.json"
  printf 'vllm-fleet sandbox, built %s by sandbox/host.sh (%s)\n' "$(date -u +%FT%TZ)" "${BUILT_BASE##*/}" \
    >"$root/etc/vllm-fleet-sandbox/build-info"
}

stage_ssh() {
  local root="$1"
  rm -f "$root"/etc/ssh/ssh_host_*
  in_root "$root" ssh-keygen -A >/dev/null
  # Production sshd default for this project: no AcceptEnv at all (secrets go over stdin).
  sed -i -E 's/^[[:space:]]*AcceptEnv\b/# removed by vllm-fleet sandbox: &/' "$root/etc/ssh/sshd_config"
  mkdir -p "$root/etc/ssh/sshd_config.d"
  cat >"$root/etc/ssh/sshd_config.d/10-vllm-fleet-sandbox.conf" <<'EOF'
# vllm-fleet sandbox: key-only root login, like the production servers.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
EOF
  install -d -m 0700 "$root/root/.ssh"
  mkdir -p "$root/run/sshd"
  local effective
  effective="$(in_root "$root" /usr/sbin/sshd -T -C user=root,host=localhost,addr=127.0.0.1)" ||
    die "sshd rejects its configuration"
  rm -rf "$root/run/sshd"
  grep -qi '^acceptenv' <<<"$effective" && die "sshd still has AcceptEnv"
  grep -qx 'permitrootlogin without-password' <<<"$effective" || die "PermitRootLogin is not prohibit-password"
  grep -qx 'passwordauthentication no' <<<"$effective" || die "PasswordAuthentication is not off"
  say "  host keys: $(cd "$root/etc/ssh" && echo ssh_host_*_key.pub)"
}

stage_ca_certs() {
  local root="$1" bundle=/etc/ssl/certs/ca-certificates.crt n
  [[ -f $bundle ]] || {
    warn "no $bundle on this machine; HTTPS from inside may fail"
    return 0
  }
  mkdir -p "$root/usr/local/share/ca-certificates"
  # Copy the certificates this machine trusts that Debian's ca-certificates in the root does not ship
  # (a local proxy CA, typically); comparing the PEM bodies needs no openssl.
  n="$(find "$root/usr/share/ca-certificates" -name '*.crt' -print0 |
    xargs -0 cat /dev/null | cat - <(echo "#HOST-BUNDLE") "$bundle" | tr -d '\r' |
    awk -v out="$root/usr/local/share/ca-certificates" '
      /^#HOST-BUNDLE$/ { host = 1; next }
      /-----BEGIN CERTIFICATE-----/ { inc = 1; body = ""; pem = $0 "\n"; next }
      inc && /-----END CERTIFICATE-----/ {
        inc = 0; pem = pem $0 "\n"
        if (!host) { known[body] = 1 }
        else if (!(body in known)) {
          known[body] = 1; n++
          f = sprintf("%s/vllm-fleet-host-%03d.crt", out, n); printf "%s", pem > f; close(f)
        }
        next
      }
      inc { body = body $0; pem = pem $0 "\n" }
      END { print n + 0 }')"
  local out
  out="$(in_root "$root" update-ca-certificates 2>&1)" || {
    printf '%s\n' "$out" >&2
    die "update-ca-certificates failed"
  }
  say "  copied $n certificate(s) of this machine that Debian does not ship; update-ca-certificates ran"
}

stage_nvidia_smi() {
  local root="$1"
  install -m 0755 "$VLLM_FLEET_ROOT/sandbox/nvidia-smi-standin" "$root/usr/local/bin/nvidia-smi"
  in_root "$root" /usr/local/bin/nvidia-smi -L | sed 's/^/  /'
}

stage_wheelhouse() { # the wheelhouse install-vllm.sh installs from: a step of its own, as it downloads
  "$VLLM_FLEET_ROOT/sandbox/vllm-wheelhouse.sh"
}

stage_vllm() {
  local root="$1" script="$VLLM_FLEET_ROOT/sandbox/install-vllm.sh"
  if [[ ! -f "$script" ]]; then
    say "  sandbox/install-vllm.sh does not exist (yet): vLLM skipped"
    return 0
  fi
  if [[ -n "${VLLM_FLEET_SANDBOX_SKIP_VLLM:-}" ]]; then
    say "  VLLM_FLEET_SANDBOX_SKIP_VLLM is set: vLLM skipped"
    return 0
  fi
  local rc=0
  if [[ -x "$script" ]]; then "$script" "$root" || rc=$?; else bash "$script" "$root" || rc=$?; fi
  ((rc == 0)) || die "sandbox/install-vllm.sh $root failed (exit $rc)"
  [[ -z "$(mounts_under "$root")" ]] || die "install-vllm.sh left mounts under $root: $(mounts_under "$root" | tr '\n' ' ')"
}

build() {
  need_root
  ensure_host_packages
  mkdir -p "$CACHE"
  local base
  # The key is taken once: sources edited during the build make the next build start over, they must
  # not make this one look for an image under another name.
  base="$(base_dir)"
  BUILT_BASE="$base"
  if [[ -d "$base/root" ]]; then
    touch "$base" # used now: the clean-up of another checkout's build keeps it
    say "base image is up to date: $base ($(du -sh "$base" 2>/dev/null | cut -f1))"
    return 0
  fi
  exec 8>"$CACHE/.build.lock"
  flock 8
  if [[ -d "$base/root" ]]; then # built by someone else while we waited
    touch "$base"
    exec 8>&-
    return 0
  fi
  local t0="$EPOCHREALTIME" d
  for d in "$CACHE"/.tmp-base-*; do [[ -e "$d" ]] && rm_tree "$d"; done
  BUILD_TMP="$(mktemp -d "$CACHE/.tmp-${base##*/}.XXXXXX")"
  local tmp="$BUILD_TMP"
  trap build_failed EXIT
  mkdir -p "$VLLM_FLEET_LOGS"
  : >"$BUILD_LOG"
  say "building base image $base (a few minutes, once per machine; log: $BUILD_LOG)"
  timed "debootstrap" stage_debootstrap "$tmp/root"
  timed "system config" stage_system "$tmp/root"
  timed "openssh-server" stage_ssh "$tmp/root"
  timed "CA certificates" stage_ca_certs "$tmp/root"
  timed "nvidia-smi stand-in" stage_nvidia_smi "$tmp/root"
  if [[ "$(flavor)" == vllm ]]; then timed "vLLM wheelhouse (sandbox/vllm-wheelhouse.sh)" stage_wheelhouse; fi
  timed "vLLM (sandbox/install-vllm.sh)" stage_vllm "$tmp/root"
  chmod 0755 "$tmp"
  mv -T "$tmp" "$base"
  trap - EXIT
  say "base image built in $(elapsed "$t0"): $base ($(du -sh "$base" | cut -f1))"
  # Old images of this flavour: other checkouts on this machine may still want them. Keep this one, those
  # a sandbox runs on (mounted as an overlay's lower directory, or recorded by this checkout's hosts) and
  # those an `up` used within a day (it touches its image); remove the rest.
  local in_use
  in_use="$(cat "$VLLM_FLEET_ROOT"/.sandbox/base "$VLLM_FLEET_ROOT"/.sandbox-*/base 2>/dev/null || true; mounted_lowers)"
  for d in "${base%-*}-"* "$CACHE"/base-[0-9a-f]*; do
    [[ -d "$d" ]] || continue
    [[ "$d" == "$base" ]] && continue
    grep -qxF "$d/root" <<<"$in_use" && continue
    [[ -z "$(find "$d" -maxdepth 0 -mmin -1440)" ]] || continue
    local t1="$EPOCHREALTIME"
    rm_tree "$d"
    say "removed old base image $d in $(elapsed "$t1")"
  done
  for d in "$CACHE"/debootstrap-*.tar.zst; do
    [[ -e "$d" && "$d" != "$CACHE/debootstrap-$(debootstrap_key).tar.zst" ]] && rm -f "$d"
  done
  exec 8>&-
}

build_failed() { # EXIT trap of build: remove the half-built root (several GB once vLLM is in)
  local rc=$?
  trap - EXIT
  if [[ -n "${BUILD_TMP:-}" && -d "$BUILD_TMP" ]]; then
    say "build failed: removing $BUILD_TMP" >&2
    rm_tree "$BUILD_TMP" || true
  fi
  exit $((rc == 0 ? 1 : rc))
}

# ------------------------------------------------------------------------------------------ processes

pidfile_pid() { [[ -f "$PIDS/$1" ]] && cat "$PIDS/$1"; }

# is_ours KIND PID: PID is alive and is the process we started (not a reused pid).
is_ours() {
  local kind="$1" pid="$2" cmd
  [[ "$pid" =~ ^[0-9]+$ && -d /proc/$pid ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  case "$kind" in
    supervisor) [[ "$cmd" == *"$SELF _supervise $INSTANCE "* ]] ;;
    nspawn) [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == systemd-nspawn && "$cmd" == *"--directory=$ROOT "* ]] ;;
    fwd) [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" == "$SOCK" && "$cmd" == socat* ]] ;;
    *) return 1 ;;
  esac
}

alive() { local p; p="$(pidfile_pid "$1")" && is_ours "${2:-$1}" "$p"; }

# The host pid of the container's init (systemd), a child of systemd-nspawn in another pid namespace.
container_pid_of() { # container_pid_of NSPAWN_PID
  local c mine
  mine="$(readlink /proc/self/ns/pid)"
  for c in $(ps -o pid= --ppid "$1"); do
    if [[ "$(readlink "/proc/$c/ns/pid" 2>/dev/null)" != "$mine" ]]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

container_pid() {
  local np
  np="$(pidfile_pid nspawn)" && is_ours nspawn "$np" && container_pid_of "$np"
}

# pids/container = "PID PIDNS" of the container's init, noted by the supervisor at each boot: if
# systemd-nspawn dies by SIGKILL, that init lives on (re-parented), and `down` must still find it.
record_container() { # record_container NSPAWN_PID (runs in the background of the supervisor)
  local i c
  for ((i = 0; i < 300; i++)); do
    if c="$(container_pid_of "$1")"; then
      echo "$c $(readlink "/proc/$c/ns/pid")" >"$PIDS/container.tmp"
      mv -f "$PIDS/container.tmp" "$PIDS/container"
      return 0
    fi
    [[ -d /proc/$1 ]] || return 0
    sleep 0.1
  done
}

orphan_container() { # prints the pid of a recorded container init that is still alive
  local pid ns
  [[ -f "$PIDS/container" ]] || return 1
  read -r pid ns <"$PIDS/container"
  [[ -n "$ns" && "$(readlink "/proc/$pid/ns/pid" 2>/dev/null)" == "$ns" ]] && echo "$pid"
}

is_up() { alive supervisor && alive nspawn; }

wait_gone() { # wait_gone PID SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [[ -d /proc/$1 ]] || return 0
    # a zombie child of someone else counts as gone for us
    [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" == Z ]] && return 0
    sleep 0.1
  done
  return 1
}

# ------------------------------------------------------------------------------------------ supervisor

nspawn_args() {
  printf '%s\n' --boot "--directory=$ROOT" "--machine=$MACHINE" --register=no --keep-unit \
    "--network-namespace-path=$NETNS_PATH" --capability=CAP_NET_ADMIN --console=read-only \
    --link-journal=no --resolv-conf=off
  ((${#NSPAWN_EXTRA[@]} == 0)) || printf '%s\n' "${NSPAWN_EXTRA[@]}"
}

supervise() { # runs detached (setsid), output to nspawn.log
  echo "$$" >"$PIDS/supervisor"
  local own
  while IFS= read -r own; do echo "$$" >"$own/cgroup.procs"; done <"$STATE/cgroups"
  local child="" rc boots=0 args
  mapfile -t args < <(nspawn_args)
  trap 'touch "$STATE/stopping"; [[ -n "$child" ]] && kill -TERM "$child" 2>/dev/null' TERM INT HUP
  while [[ ! -e "$STATE/stopping" ]]; do
    boots=$((boots + 1))
    echo "$boots" >"$STATE/boots"
    printf '\n===== [supervisor %s] boot #%d at %s: systemd-nspawn %s\n' "$$" "$boots" "$(date -u +%FT%TZ)" "${args[*]}"
    # TERM=dumb: systemd's boot messages without colour codes in the log
    TERM=dumb systemd-nspawn "${args[@]}" </dev/null &
    child=$!
    echo "$child" >"$PIDS/nspawn"
    rm -f "$PIDS/container"
    record_container "$child" &
    while :; do
      rc=0
      wait "$child" || rc=$?
      [[ -d /proc/$child ]] || break # else: a trapped signal interrupted wait
    done
    child=""
    printf '===== [supervisor %s] systemd-nspawn exited with %d at %s\n' "$$" "$rc" "$(date -u +%FT%TZ)"
    if ((rc != 133)); then break; fi
    printf '===== [supervisor %s] exit 133 = reboot requested inside: booting again\n' "$$"
  done
  rm -f "$PIDS/nspawn"
  printf '===== [supervisor %s] stopped\n' "$$"
}

# ------------------------------------------------------------------------------------------ ssh

SSH_OPTS=(-i "$KEY" -p "$SSH_PORT" -o IdentitiesOnly=yes -o "UserKnownHostsFile=$KNOWN_HOSTS"
  -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o BatchMode=yes -o LogLevel=ERROR
  -o ConnectTimeout=5)

# ssh_run CMD...: run a command in the sandbox (ssh joins the words, as ever)
# shellcheck disable=SC2029
ssh_run() { ssh "${SSH_OPTS[@]}" root@127.0.0.1 "$@"; }

# make_host_keys: this host's own SSH host keys, made once (its `down` keeps them, so its known_hosts
# lines stay valid across down and up).
make_host_keys() {
  local type
  mkdir -p "$HOST_KEY_DIR"
  chmod 700 "$HOST_KEY_DIR"
  for type in ed25519 ecdsa rsa; do
    [[ -f "$HOST_KEY_DIR/ssh_host_${type}_key" ]] ||
      ssh-keygen -q -t "$type" -N '' -C "root@$MACHINE" -f "$HOST_KEY_DIR/ssh_host_${type}_key"
  done
}

install_host_keys() { # install_host_keys ROOT: in place of the base image's keys (the overlay's upper layer)
  rm -f "$1"/etc/ssh/ssh_host_*
  install -m 0600 "$HOST_KEY_DIR"/ssh_host_*_key "$1/etc/ssh/"
  install -m 0644 "$HOST_KEY_DIR"/ssh_host_*_key.pub "$1/etc/ssh/"
}

prepare_ssh_client() { # key (kept across down/up), known_hosts of this host's keys, a config for ssh -F
  mkdir -p "$SSH_DIR" "$KEY_DIR"
  chmod 700 "$SSH_DIR" "$KEY_DIR"
  [[ -f "$KEY" ]] || ssh-keygen -q -t ed25519 -N '' -C "vllm-fleet-sandbox" -f "$KEY"
  local host="[127.0.0.1]:$SSH_PORT" f
  [[ "$SSH_PORT" == 22 ]] && host=127.0.0.1
  : >"$KNOWN_HOSTS.tmp"
  for f in "$HOST_KEY_DIR"/ssh_host_*_key.pub; do
    printf '%s %s\n' "$host" "$(cut -d' ' -f1,2 "$f")" >>"$KNOWN_HOSTS.tmp"
  done
  mv -f "$KNOWN_HOSTS.tmp" "$KNOWN_HOSTS"
  cat >"$SSH_DIR/config" <<EOF
# ssh -F $SSH_DIR/config $MACHINE
Host $MACHINE
  HostName 127.0.0.1
  Port $SSH_PORT
  User root
  IdentityFile $KEY
  IdentitiesOnly yes
  UserKnownHostsFile $KNOWN_HOSTS
  StrictHostKeyChecking yes
EOF
}

# wait_ready SECONDS: until ssh works and `systemctl is-system-running --wait` says running; 2 when the
# sandbox stops meanwhile, i.e. its supervisor is gone. Not when systemd-nspawn is: a reboot inside ends
# it (exit 133) and the supervisor starts the next one a moment later, so a `wait` just after
# `systemctl reboot` found the sandbox "down" and failed at once.
wait_ready() {
  local deadline=$((SECONDS + $1)) state=""
  until ssh_run true 2>/dev/null; do
    alive supervisor || return 2
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
  while :; do
    state="$(timeout "$((deadline > SECONDS ? deadline - SECONDS : 1))" \
      ssh "${SSH_OPTS[@]}" root@127.0.0.1 systemctl is-system-running --wait 2>/dev/null)" || true
    case "$state" in
      running) return 0 ;;
      degraded)
        warn "systemd is degraded; failed units:"
        ssh_run systemctl --failed --no-legend >&2 || true
        return 0
        ;;
    esac
    alive supervisor || return 2
    ((SECONDS < deadline)) || return 1
    sleep 0.5
  done
}

# ------------------------------------------------------------------------------------------ up

port_free() { [[ -z "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]]; }

start_fwd() { # start_fwd NAME CMD...: a detached forwarder, cwd = sock dir, pid in pids/fwd-NAME
  local name="$1" pid
  shift
  (cd "$SOCK" && exec setsid "$@") </dev/null >>"$STATE/forwarders.log" 2>&1 9>&- 8>&- &
  pid=$!
  echo "$pid" >"$PIDS/fwd-$name"
}

check_fwds() {
  local f ok=0
  for f in "$PIDS"/fwd-*; do
    [[ -e "$f" ]] || continue
    if ! is_ours fwd "$(cat "$f")"; then
      warn "forwarder ${f##*/fwd-} is not running"
      ok=1
    fi
  done
  return "$ok"
}

start_forwarders() {
  local in_ns=(nsenter "--net=$NETNS_PATH") pair hp sp
  start_fwd ssh-in "${in_ns[@]}" socat UNIX-LISTEN:ssh.sock,fork,unlink-early TCP:127.0.0.1:22
  start_fwd ssh-out socat "TCP-LISTEN:$SSH_PORT,bind=127.0.0.1,fork,reuseaddr" UNIX-CONNECT:ssh.sock
  for pair in "${API_PORTS[@]}"; do
    hp="${pair%%:*}" sp="${pair##*:}"
    start_fwd "api-$hp-in" "${in_ns[@]}" socat "UNIX-LISTEN:api-$hp.sock,fork,unlink-early" "TCP:127.0.0.1:$sp"
    start_fwd "api-$hp-out" socat "TCP-LISTEN:$hp,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:api-$hp.sock"
  done
  # From the host's own loopback address, so the mirror's log says which host asked.
  start_fwd mirror-out socat UNIX-LISTEN:mirror.sock,fork,unlink-early "TCP:127.0.0.1:$MIRROR_PORT,bind=$MIRROR_CLIENT"
  start_fwd mirror-in "${in_ns[@]}" socat "TCP-LISTEN:$MIRROR_PORT,bind=127.0.0.1,fork,reuseaddr" \
    UNIX-CONNECT:mirror.sock
  sleep 0.3
  check_fwds || die "a port forwarder did not start (log: $STATE/forwarders.log)"
}

# The fabric: a bridge in a netns of its own, one veth pair per host (fabric0 inside), so hosts reach each
# other at their own addresses as servers on one switch do, and this machine's own network is untouched.
fabric_join() {
  local port="p-$INSTANCE"
  if [[ ! -e "/run/netns/$FABRIC_NETNS" ]]; then
    ip netns add "$FABRIC_NETNS"
    ip -n "$FABRIC_NETNS" link set lo up
    ip -n "$FABRIC_NETNS" link add fabric type bridge
    ip -n "$FABRIC_NETNS" link set fabric up
  fi
  ip -n "$FABRIC_NETNS" link add "$port" type veth peer name "$FABRIC_IF" netns "$NETNS"
  ip -n "$FABRIC_NETNS" link set "$port" master fabric up
  ip -n "$NETNS" addr add "$FABRIC_ADDRESS/24" dev "$FABRIC_IF"
  ip -n "$NETNS" link set "$FABRIC_IF" up
}

# Deleting a host's netns deletes its veth pair; the fabric goes with the last host.
fabric_leave() {
  [[ -e "/run/netns/$FABRIC_NETNS" ]] || return 0
  if ! ip netns list | awk '{ print $1 }' | grep -v -x "$FABRIC_NETNS" | grep -q '^vllmfleet-'; then
    ip netns del "$FABRIC_NETNS"
  fi
}

name_host() { # name_host ROOT: this host's name, and every sandbox host's fabric address by name
  local i
  echo "$MACHINE" >"$1/etc/hostname"
  {
    printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' "$MACHINE"
    printf '%s.10\tvllm-sandbox\n' "$FABRIC_NET"
    for ((i = 1; i <= FLEET_MAX; i++)); do printf '%s.%d\tvllm-fleet-%d\n' "$FABRIC_NET" $((10 + i)) "$i"; done
  } >"$1/etc/hosts"
}

# set_locale ROOT: the system locale a Debian server's installer writes. debootstrap does not, and without
# it sshd's pam_env logs "Unable to open env file: /etc/default/locale" at every login, which reads like a
# fault on a host that has none. Written at `up` like the names, so that adding it rebuilt no base image.
set_locale() {
  printf 'LANG=C.UTF-8\n' >"$1/etc/default/locale"
}

mount_root() {
  local lower="$1"
  mkdir -p "$STATE/overlay/upper" "$STATE/overlay/work" "$ROOT"
  if mount -t overlay "$NETNS" -o "lowerdir=$lower,upperdir=$STATE/overlay/upper,workdir=$STATE/overlay/work" \
    "$ROOT" 2>"$STATE/overlay.err"; then
    echo overlay >"$STATE/mode"
    say "root: overlayfs (lower $lower, upper $STATE/overlay/upper)"
  else
    warn "overlayfs cannot be mounted here ($(cat "$STATE/overlay.err")): falling back to a full copy"
    rm -rf "$STATE/overlay"
    cp -a --reflink=auto "$lower/." "$ROOT/"
    echo copy >"$STATE/mode"
    say "root: a copy of $lower"
  fi
}

up() {
  lifecycle_start
  mkdir -p "$VLLM_FLEET_LOGS"
  if is_up; then
    report_up "already up" || true
    return 0
  fi
  : >"$UP_LOG"
  local t0="$EPOCHREALTIME" lower rc pair
  ensure_host_packages
  if has_leftovers; then
    progress sandbox "cleaning up what a previous run left behind" "" "$UP_LOG" teardown
  fi
  build
  lower="$BUILT_BASE/root"
  [[ -d "$lower" ]] || die "no base image at $lower"
  for pair in "$SSH_PORT" "${API_PORTS[@]%%:*}"; do
    port_free "$pair" || die "127.0.0.1:$pair is already in use: $(ss -Hltnp "sport = :$pair" | head -1)"
  done
  UP_DONE=""
  trap up_failed EXIT
  mkdir -p "$STATE" "$PIDS" "$SOCK"
  rm -f "$STATE/stopping"
  make_host_keys
  prepare_ssh_client
  "$VLLM_FLEET_ROOT/sandbox/tls.sh" >>"$UP_LOG" 2>&1
  echo "$lower" >"$STATE/base"
  mount_root "$lower" >>"$UP_LOG"
  install_host_keys "$ROOT"
  install -d -m 0700 "$ROOT/root/.ssh"
  install -m 0600 "$KEY.pub" "$ROOT/root/.ssh/authorized_keys"
  if ! mountpoint -q /run/netns 2>/dev/null; then touch "$STATE/created-run-netns"; fi
  record_nspawn_dirs
  ip netns add "$NETNS"
  ip -n "$NETNS" link set lo up
  fabric_join
  name_host "$ROOT"
  set_locale "$ROOT"
  start_forwarders
  : >"$LOG"
  (exec setsid "$SELF" _supervise "$INSTANCE") </dev/null >>"$LOG" 2>&1 9>&- 8>&- &
  local i
  for ((i = 0; i < 50; i++)); do
    alive nspawn && break
    sleep 0.1
  done
  sleep 0.2
  is_up || die "systemd-nspawn exited at once"
  rc=0
  progress sandbox "booting $MACHINE (ssh and systemd ready, at most ${BOOT_TIMEOUT}s)" "" "$UP_LOG" \
    wait_ready "$BOOT_TIMEOUT" || rc=$?
  ((rc != 2)) || die "systemd-nspawn exited during the boot"
  ((rc == 0)) || die "no ssh + running systemd within ${BOOT_TIMEOUT}s"
  UP_DONE=1
  trap - EXIT
  report_up "up in $(elapsed "$t0")"
}

report_up() { # report_up WHAT: one line (what, how to log in); the full status report goes to the log
  local state
  if ! status_report >>"$UP_LOG" 2>&1; then
    warn "$MACHINE is up but not healthy: $(grep -E 'WARNING|fails' "$UP_LOG" | tail -n 1); \`$SELF status\` says more"
    return 1
  fi
  state="$(ssh_run systemctl is-system-running 2>/dev/null || true)"
  if [[ "$state" == degraded ]]; then
    warn "systemd in $MACHINE is degraded; failed units: $(ssh_run systemctl --failed --no-legend --plain 2>/dev/null | awk '{print $1}' | paste -sd' ' -)"
  fi
  say "$1: ssh -F $SSH_DIR/config $MACHINE (127.0.0.1:$SSH_PORT); sandbox/host.sh status for the rest"
}

up_failed() { # EXIT trap of `up` between the first change and success: show why, clean up
  local rc=$?
  [[ -z "${UP_DONE:-}" ]] || return 0
  trap - EXIT
  printf '[sandbox] ERROR: the sandbox did not come up; the steps'"'"' output is in %s, its console log in %s:\n' \
    "$UP_LOG" "$LOG" >&2
  if [[ -s "$LOG" ]]; then tail -n 40 "$LOG" >&2; elif [[ -f "$UP_LOG" ]]; then tail -n 25 "$UP_LOG" >&2; fi
  if [[ -n "${VLLM_FLEET_SANDBOX_KEEP_FAILED:-}" ]]; then
    warn "VLLM_FLEET_SANDBOX_KEEP_FAILED is set: left as it is; \`$SELF down\` cleans up"
  else
    say "tearing it down again (VLLM_FLEET_SANDBOX_KEEP_FAILED=1 keeps it for inspection);" \
      "the whole console log stays in $LOCAL_CACHE/last-nspawn.log" >&2
    teardown >&2 || true
  fi
  exit $((rc == 0 ? 1 : rc))
}

# ------------------------------------------------------------------------------------------ down

# systemd-nspawn --keep-unit puts itself and the container into cgroups "supervisor" and "payload" below
# the caller's. On this machine's hybrid cgroup layout it creates them in the unified hierarchy but only
# attaches in the named "systemd" one ("Failed to attach ... to compat systemd cgroup //payload: No such
# file or directory", exit 1), so they are made here first. The ones that did not exist (and
# /run/systemd/nspawn) are noted, so that `down` removes them once empty.
#
# Each host gets a cgroup of its own first (vllmfleet-<name>, where the supervisor moves itself, listed in
# $STATE/cgroups): hosts whose payloads shared one cgroup managed each other's units' cgroups (one host's
# systemd saw the other's engine in "its" unit, could not stop the unit, and never unloaded it).
record_nspawn_dirs() {
  local line path mnt d own
  : >"$STATE/created-dirs"
  : >"$STATE/cgroups"
  while IFS= read -r line; do
    path="${line#*:*:}"
    case "$line" in
      *:name=systemd:*) mnt="$(findmnt -rn -t cgroup -o TARGET,OPTIONS | awk '$2 ~ /name=systemd/ { print $1; exit }')" ;;
      0::*) mnt="$(findmnt -rn -t cgroup2 -o TARGET | head -n 1)" ;;
      *) continue ;;
    esac
    [[ -n "$mnt" ]] || continue
    own="$mnt${path%/}/vllmfleet-$INSTANCE"
    if [[ ! -e "$own" ]]; then
      echo "$own" >>"$STATE/created-dirs"
      mkdir "$own"
    fi
    echo "$own" >>"$STATE/cgroups"
    for d in "$own/payload" "$own/supervisor"; do
      [[ -e "$d" ]] && continue
      echo "$d" >>"$STATE/created-dirs"
      if [[ "$line" == *:name=systemd:* ]]; then mkdir "$d"; fi
    done
  done </proc/self/cgroup
  [[ -e /run/systemd/nspawn ]] || echo /run/systemd/nspawn >>"$STATE/created-dirs"
}

remove_nspawn_dirs() { # empty directories only (rmdir): a cgroup with processes in it stays
  local d
  [[ -f "$STATE/created-dirs" ]] || return 0
  while IFS= read -r d; do
    [[ -d "$d" ]] || continue
    # stale image lock files of a SIGKILLed systemd-nspawn: only when no systemd-nspawn runs at all
    if [[ "$d" == /run/systemd/nspawn ]] && ! ps -C systemd-nspawn >/dev/null; then
      rm -rf --one-file-system "$d"
    fi
    find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d "$d" ]] && warn "could not remove $d (not empty)"
  done <"$STATE/created-dirs"
  return 0
}

has_leftovers() {
  [[ -d "$PIDS" || -e "$NETNS_PATH" || -n "$(mounts_under "$STATE")" ]] && return 0
  [[ -d "$STATE" ]] && [[ -n "$(find "$STATE" -mindepth 1 -maxdepth 1 ! -name ssh -print -quit)" ]]
}

FORMER_PIDS=() # the processes teardown ended; verify_gone waits until they are reaped

kill_ours() { # kill_ours KIND PIDFILE: TERM the process group we started, then KILL after a while
  local pid
  pid="$(pidfile_pid "$2")" || return 0
  if is_ours "$1" "$pid"; then
    FORMER_PIDS+=("$pid")
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    wait_gone "$pid" 5 || {
      warn "$2 ($pid) ignored SIGTERM: SIGKILL"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 5 || true
    }
  fi
  rm -f "$PIDS/$2"
}

teardown() {
  local np cp f
  if [[ -d "$STATE" ]]; then touch "$STATE/stopping"; fi
  # 1. the container: an orderly poweroff (SIGTERM makes nspawn send SIGRTMIN+3 to the container's init)
  np="$(pidfile_pid nspawn)" || np=""
  if [[ -n "$np" ]] && is_ours nspawn "$np"; then
    cp="$(container_pid)" || cp=""
    FORMER_PIDS+=("$np")
    [[ -z "$cp" ]] || FORMER_PIDS+=("$cp")
    say "powering the container off (systemd-nspawn $np, container init $cp)"
    kill -TERM "$np"
    if ! wait_gone "$np" "$STOP_TIMEOUT"; then
      warn "no clean poweroff within ${STOP_TIMEOUT}s: SIGKILL container init and systemd-nspawn"
      [[ -n "$cp" ]] && kill -KILL "$cp" 2>/dev/null
      kill -KILL "$np" 2>/dev/null || true
      wait_gone "$np" 10 || warn "systemd-nspawn $np is still there"
    fi
  fi
  # 2. the supervisor (it ends by itself once nspawn exited without 133)
  f="$(pidfile_pid supervisor)" || f=""
  if [[ -n "$f" ]] && is_ours supervisor "$f"; then
    FORMER_PIDS+=("$f")
    wait_gone "$f" 5 || kill_ours supervisor supervisor
  fi
  rm -f "$PIDS/supervisor"
  # 3. a container whose systemd-nspawn was killed: SIGKILL to its init ends its whole pid namespace
  if cp="$(orphan_container)"; then
    warn "the container's init $cp outlived systemd-nspawn: SIGKILL"
    FORMER_PIDS+=("$cp")
    kill -KILL "$cp" 2>/dev/null || true
    wait_gone "$cp" 10 || warn "container init $cp is still there"
  fi
  # 4. the forwarders
  for f in "$PIDS"/fwd-*; do
    [[ -e "$f" ]] && kill_ours fwd "${f##*/}"
  done
  # 5. mounts
  if mountpoint -q "$ROOT" 2>/dev/null; then
    local i
    for ((i = 0; i < 20; i++)); do
      umount "$ROOT" 2>/dev/null && break
      sleep 0.25
    done
    if mountpoint -q "$ROOT"; then
      warn "$ROOT is busy: lazy unmount"
      umount -l "$ROOT"
    fi
  fi
  [[ -z "$(mounts_under "$STATE")" ]] || die "mounts left under $STATE: $(mounts_under "$STATE" | tr '\n' ' ')"
  # 6. the network namespace (and /run/netns, if `ip netns add` made it a mount point for us)
  if [[ -e "$NETNS_PATH" ]]; then ip netns del "$NETNS"; fi
  fabric_leave
  if [[ -e "$STATE/created-run-netns" ]] && mountpoint -q /run/netns && [[ -z "$(ip netns list)" ]]; then
    umount /run/netns 2>/dev/null || true
  fi
  remove_nspawn_dirs
  # 7. run state (the ssh key pair stays, so a client configured with it keeps working); the last
  #    console log goes to the cache
  if [[ -f "$LOG" ]]; then cp -f "$LOG" "$LOCAL_CACHE/last-nspawn.log"; fi
  if [[ -d "$STATE" ]]; then
    find "$STATE" -mindepth 1 -maxdepth 1 ! -name ssh -exec rm -rf --one-file-system {} +
  fi
}

verify_gone() { # verify_gone [PIDNS]: nothing of the sandbox left (PIDNS: the container's, e.g. pid:[4026...])
  local pidns="${1:-}" procs ns mnts bad=0 p i zombies=()
  # Ended processes whose parent is gone are reaped by this machine's PID 1, which can take a moment;
  # until then ps lists them as "[socat] <defunct>".
  for ((i = 0; i < 150; i++)); do
    zombies=()
    for p in "${FORMER_PIDS[@]}"; do [[ -d /proc/$p ]] && zombies+=("$p"); done
    ((${#zombies[@]})) || break
    sleep 0.1
  done
  for p in "${zombies[@]}"; do
    if [[ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ]]; then
      warn "process $p we ended is still running: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
      bad=1
    fi
  done
  procs="$(ps -eo pid=,args= | awk -v s="$STATE" -v n="$NETNS" -v m="--machine=$MACHINE" -v me="$$" \
    '$1 != me && (index($0, s) || index($0, n " ") || index($0, m " ")) && !/awk -v s=/' || true)"
  # processes still in the container's pid namespace
  if [[ -n "$pidns" ]]; then
    for p in /proc/[0-9]*; do
      [[ "$(readlink "$p/ns/pid" 2>/dev/null)" == "$pidns" ]] && procs+=$'\n'"${p#/proc/} $(cat "$p/comm" 2>/dev/null) (in the container's $pidns)"
    done
  fi
  procs="$(sed '/^$/d' <<<"$procs")"
  ns="$(ip netns list 2>/dev/null | grep -F "$NETNS" || true)"
  mnts="$(mount | grep -F -e "$STATE" -e "$NETNS" || true)"
  if [[ -n "$procs" ]]; then
    warn "processes left: $procs"
    bad=1
  elif ((${#zombies[@]})); then
    say "verified: ps shows no running sandbox process (${#zombies[@]} exited, not yet reaped by PID 1: ${zombies[*]})"
  else say "verified: ps shows no sandbox process"; fi
  none_left netns "$ns" "ip netns shows no $NETNS" || bad=1
  none_left mounts "$mnts" "mount shows nothing under $STATE" || bad=1
  return "$bad"
}

none_left() { # none_left WHAT FOUND VERIFIED: warn that WHAT is left (status 1) when FOUND is not empty, else say VERIFIED
  if [[ -n "$2" ]]; then
    warn "$1 left: $2"
    return 1
  fi
  say "verified: $3"
}

down() {
  lifecycle_start
  local t0="$EPOCHREALTIME" pidns="" cp
  if [[ -f "$PIDS/container" ]]; then read -r cp pidns <"$PIDS/container" || true; fi
  if ! is_up && ! has_leftovers; then
    say "already down"
  else
    teardown
    say "down in $(elapsed "$t0")"
  fi
  verify_gone "$pidns"
}

# ------------------------------------------------------------------------------------------ status

status_report() {
  local pair rc=0
  say "status: up ($(cat "$STATE/mode" 2>/dev/null || echo ?) root, boot #$(cat "$STATE/boots" 2>/dev/null || echo ?))"
  say "  supervisor pid $(pidfile_pid supervisor), systemd-nspawn pid $(pidfile_pid nspawn), container init pid $(container_pid || echo ?)"
  say "  base $(cat "$STATE/base" 2>/dev/null)$([[ "$(cat "$STATE/base" 2>/dev/null)" == "$(base_dir)/root" ]] || echo " (STALE: sources changed; down + up rebuilds)")"
  say "  ssh: ssh -F $SSH_DIR/config $MACHINE   (= root@127.0.0.1 -p $SSH_PORT -i $KEY)"
  for pair in "${API_PORTS[@]}"; do
    say "  port: host 127.0.0.1:${pair%%:*} -> sandbox 127.0.0.1:${pair##*:}"
  done
  say "  port: sandbox 127.0.0.1:$MIRROR_PORT -> host 127.0.0.1:$MIRROR_PORT (HF mirror)"
  check_fwds || rc=1
  local state
  if state="$(ssh_run systemctl is-system-running 2>/dev/null)" || [[ -n "$state" ]]; then
    say "  ssh works; systemd: $state"
  else
    warn "ssh to 127.0.0.1:$SSH_PORT fails"
    rc=1
  fi
  return "$rc"
}

status() {
  if is_up; then
    status_report
  else
    say "status: down"
    has_leftovers && warn "left-overs of an earlier run exist; \`$0 down\` removes them"
    exit 3
  fi
}

# ------------------------------------------------------------------------------------------ main

fleet_up() { # fleet_up N: fleet-1..N, one after the other (each `up` holds the lifecycle lock)
  [[ "$1" =~ ^[1-8]$ ]] || die "fleet-up N: N from 1 to $FLEET_MAX, not $1"
  local i
  for ((i = 1; i <= $1; i++)); do VLLM_FLEET_SANDBOX_NAME="fleet-$i" "$SELF" up; done
}

fleet_down() {
  local d rc=0
  for d in "$VLLM_FLEET_ROOT"/.sandbox-fleet-*; do
    [[ -d "$d" ]] || continue
    VLLM_FLEET_SANDBOX_NAME="${d##*/.sandbox-}" "$SELF" down || rc=1
  done
  return "$rc"
}

usage() { # usage [EXIT_CODE]
  sed -n '2,20p' "$SELF" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    build) build ;;
    up) up ;;
    down) down ;;
    status) status ;;
    wait)
      alive supervisor || die "the sandbox is down"
      local t0="$EPOCHREALTIME" rc=0
      wait_ready "$BOOT_TIMEOUT" || rc=$?
      ((rc != 2)) || die "the sandbox stopped while it was booting (log: $LOG)"
      ((rc == 0)) || die "not ready within ${BOOT_TIMEOUT}s (log: $LOG)"
      say "ready after $(elapsed "$t0")"
      ;;
    ssh)
      is_up || die "the sandbox is down (run: $0 up)"
      if [[ $# -eq 0 && -t 0 ]]; then exec ssh -t "${SSH_OPTS[@]}" root@127.0.0.1; fi
      exec ssh "${SSH_OPTS[@]}" root@127.0.0.1 "$@"
      ;;
    exec)
      local cp
      is_up || die "the sandbox is down (run: $0 up)"
      cp="$(container_pid)" || die "cannot find the container's init process"
      [[ $# -gt 0 ]] || set -- /bin/bash -l
      exec nsenter -t "$cp" -a -r -w /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root TERM="${TERM:-dumb}" LANG=C.UTF-8 "$@"
      ;;
    _supervise) supervise ;;
    fleet-up) fleet_up "${1:-2}" ;;
    fleet-down) fleet_down ;;
    -h | --help | help) usage 0 ;;
    "") usage ;;
    *)
      echo "unknown subcommand: $cmd" >&2
      usage
      ;;
  esac
  # Exit from inside main, whose body bash parsed whole: a long-running `_supervise` must never read on
  # into a host.sh that was edited while it ran.
  exit 0
}

main "$@"
