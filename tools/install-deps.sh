#!/usr/bin/env bash
# Installs what building and testing ckpt needs on a Debian 12 machine (run as
# root). Idempotent and quick when everything is present; never removes a
# system package.
#
# Two parts:
#  1. Debian packages, apt-installed only when dpkg says they are missing.
#  2. Boost >= 1.81 (PFR with C++20 field names, Hana) and msgpack-cxx headers,
#     unpacked into the repo-local prefix .deps/ instead of being installed:
#     libmsgpack-cxx-dev depends on libboost-dev (Boost 1.74), which conflicts
#     with libboost1.81-dev, so apt cannot install both. ckpt defines
#     MSGPACK_NO_BOOST, so msgpack never needs the system Boost.
#
# Environment: CKPT_DEPS_PREFIX overrides the prefix (default <repo>/.deps).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=${CKPT_DEPS_PREFIX:-$repo_root/.deps}

apt_packages=(
  g++ clang libclang-rt-14-dev cmake make ninja-build pkg-config meson
  libxtensor-dev xtl-dev doctest-dev
  libzstd-dev zlib1g-dev libxxhash-dev libsnappy-dev nlohmann-json3-dev libcli11-dev
  libblosc-dev liblz4-dev libbz2-dev
  # ckpt::mpi and its tests (mpirun)
  libopenmpi-dev openmpi-bin
  # ckpt::torch (<ckpt/torch.hpp>), its tests and example
  libtorch-dev
  # the S3 storage backend (ckpt::s3, <ckpt/storage/s3.hpp>)
  libcurl4-openssl-dev
  # Eigen's leaves (ckpt::eigen, <ckpt/eigen.hpp>) and tests/test_eigen.cpp
  libeigen3-dev
  # bench/bench_peers.cpp compares with these (optional: the bench builds without them)
  libhdf5-dev libcereal-dev
  # used by interop tests through /usr/bin/python3
  python3-zarr python3-numpy python3-msgpack python3-numcodecs python3-zstandard
  # tests/gcs_server.py's crc32c in C (a pure-Python one is its fallback)
  python3-crcmod
  # PyTorch, the oracle of tests/test_pytorch.cpp (torch.save files both ways) and of
  # the libtorch tests and example
  python3-torch
  # the Python reader (python/) and its tests, which ctest runs with pytest (pip:
  # the test that installs it offline)
  python3-xxhash python3-pytest python3-pip
  # the durability test records a save's system calls (tests/durability/)
  strace
  # test_cli renders the page of `ckpt report` in a headless browser (skipped without it)
  chromium
)
# unpacked into $prefix, never installed (see above)
local_debs=(libboost1.81-dev libmsgpack-cxx-dev)

log() { printf 'install-deps: %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else log "need root for: $*"; exit 1
  fi
}

is_installed() {
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    log "apt-get update"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
    apt_updated=1
  fi
}

# --- 1. Debian packages -----------------------------------------------------
missing=()
for p in "${apt_packages[@]}"; do
  is_installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  apt_update_once
  log "installing: ${missing[*]}"
  # --no-install-recommends: python3-zarr's recommends pull scipy and, with
  # it, Boost 1.74 development packages.
  as_root env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# --- 1b. Node.js and s3rver: the S3 server tests/test_storage.cpp starts --------
# A node that is already there (a nodesource build bundles npm) is kept: Debian's
# nodejs and npm packages would conflict with it. s3rver goes into <repo>/.s3rver
# (git-ignored); the test installs it itself when this step could not.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt_update_once
  log "installing: nodejs npm"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
fi
s3rver_dir=$repo_root/.s3rver
if [ ! -f "$s3rver_dir/node_modules/s3rver/bin/s3rver.js" ]; then
  log "npm install s3rver@3.7.1 into $s3rver_dir"
  npm install --no-audit --no-fund --loglevel=error --prefix "$s3rver_dir" s3rver@3.7.1 >&2 \
    || log "could not install s3rver (offline?): the S3 test cases will be skipped"
fi

# --- 2. header-only deps into $prefix ------------------------------------------
stamp="$prefix/.stamp"
stamp_content="${local_debs[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_content" ] \
   && [ -f "$prefix/usr/include/boost/pfr.hpp" ] \
   && [ -f "$prefix/usr/include/msgpack.hpp" ]; then
  exit 0
fi

log "unpacking ${local_debs[*]} into $prefix"
rm -rf "$prefix"
mkdir -p "$prefix"
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT
# apt-get download as root warns that the _apt user cannot write to $dl; the
# download still succeeds (unsandboxed), so the warning is silenced.
chmod 755 "$dl"
chown _apt "$dl" 2>/dev/null || true
download() { (cd "$dl" && apt-get download -q "${local_debs[@]}" 2>&1 | grep -v 'sandbox' >&2 || true); }
download
shopt -s nullglob
debs=("$dl"/*.deb)
if [ "${#debs[@]}" -ne "${#local_debs[@]}" ]; then
  # package lists may be missing or stale on a fresh machine
  apt_update_once
  rm -f "$dl"/*.deb
  download
  debs=("$dl"/*.deb)
fi
if [ "${#debs[@]}" -ne "${#local_debs[@]}" ]; then
  log "could not download ${local_debs[*]}"
  exit 1
fi
for deb in "${debs[@]}"; do
  dpkg-deb -x "$deb" "$prefix"
done
for f in usr/include/boost/pfr.hpp usr/include/boost/hana.hpp usr/include/msgpack.hpp; do
  [ -f "$prefix/$f" ] || { log "missing $prefix/$f after unpacking"; exit 1; }
done
# msgpack's CMake package would pull Boost through find_dependency; ckpt uses
# the headers only, so keep the package out of reach of find_package.
rm -rf "$prefix/usr/lib/x86_64-linux-gnu/cmake/msgpackc-cxx"
echo "$stamp_content" > "$stamp"
log "done"
