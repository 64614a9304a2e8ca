#!/usr/bin/env bash
# Every public header compiles on its own: for each include/ckpt/**/*.hpp, a
# one-line TU `#include <ckpt/X.hpp>` is compiled with -fsyntax-only (header-only
# where the header holds definitions, else in separate-compilation mode: see below). A header
# that leans on what an earlier include happened to bring in fails here, not in
# a user's program that includes it first.
#
#   tools/check-headers.sh [compiler] [flags...]
#
# Default compiler: ${CXX:-g++}; default flags: -std=c++20 -Wall -Wextra -Werror
# -Iinclude plus .deps/usr/include (see tools/install-deps.sh). Runs on every
# core (JOBS overrides) and prints "N passed, M failed".
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cxx=${1:-${CXX:-g++}}
[[ $# -gt 0 ]] && shift
if [[ $# -gt 0 ]]; then
  flags=("$@")
else
  flags=(-std=c++20 -Wall -Wextra -Werror -I"$root/include")
  [[ -d "$root/.deps/usr/include" ]] && flags+=(-isystem "$root/.deps/usr/include")
fi
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

headers=$(cd "$root/include" && find ckpt -name '*.hpp' | LC_ALL=C sort)
# Headers that need an optional dependency get its flags, or are skipped without it:
# ckpt/mpi.hpp and ckpt/mpi/ need <mpi.h> (Open MPI's pkg-config name mpi-cxx).
export CKPT_MPI_CFLAGS
if CKPT_MPI_CFLAGS=$(pkg-config --cflags mpi-cxx 2>/dev/null); then :; else
  echo "skipped (no MPI): $(grep -c '^ckpt/mpi' <<<"$headers") ckpt/mpi headers"
  headers=$(grep -v '^ckpt/mpi' <<<"$headers")
fi
# ckpt/torch.hpp and the torch headers of leaf/ and tree/ need libtorch, whose C++ API
# lies under torch/csrc/api/include.
torch_api=/usr/include/torch/csrc/api/include
export CKPT_TORCH_CFLAGS="-isystem $torch_api"
torch_headers=$(grep -E '^ckpt/(torch\.hpp|leaf/torch_|tree/torch_)' <<<"$headers" || true)
# (libtorch 1.13's own headers do not compile with clang 14 in C++20: skipped there too.)
if [[ ! -f $torch_api/torch/optim/adam.h ]] ||
   ! echo "#include <ATen/core/Tensor.h>" | "$cxx" "${flags[@]}" -x c++ -fsyntax-only - >/dev/null 2>&1; then
  echo "skipped (no libtorch this compiler builds): $(wc -w <<<"$torch_headers") torch headers"
  headers=$(grep -vxF -f <(printf '%s\n' $torch_headers) <<<"$headers")
fi
# ckpt/eigen.hpp and the Eigen headers of leaf/ need Eigen (pkg-config eigen3), as a
# system directory so that -Werror never applies to Eigen's own code.
export CKPT_EIGEN_CFLAGS
eigen_headers=$(grep -E '^ckpt/(eigen\.hpp|leaf/eigen)' <<<"$headers" || true)
if CKPT_EIGEN_CFLAGS=$(pkg-config --cflags-only-I eigen3 2>/dev/null); then
  CKPT_EIGEN_CFLAGS=${CKPT_EIGEN_CFLAGS//-I/-isystem }
else
  echo "skipped (no Eigen): $(wc -w <<<"$eigen_headers") Eigen headers"
  headers=$(grep -vxF -f <(printf '%s\n' $eigen_headers) <<<"$headers")
fi
# Headers that need an optional dependency, as "header:what it includes": checked
# where that dependency is installed, skipped (and said so) where it is not.
optional=("ckpt/storage/s3.hpp:curl/curl.h" "ckpt/io/http.hpp:curl/curl.h"
          "ckpt/storage/gcs.hpp:curl/curl.h" "ckpt/storage/gcs.hpp:openssl/evp.h"
          "ckpt/storage/gcs_credentials.hpp:curl/curl.h" "ckpt/storage/gcs_credentials.hpp:openssl/evp.h"
          "ckpt/storage/s3_credentials.hpp:curl/curl.h")
for entry in "${optional[@]}"; do
  h=${entry%%:*} dep=${entry#*:}
  if ! echo "#include <$dep>" | "$cxx" "${flags[@]}" -x c++ -fsyntax-only - >/dev/null 2>&1; then
    echo "skip $h: <$dep> is not installed"
    headers=$(grep -vxF "$h" <<<"$headers")
  fi
done
# An umbrella header (nothing but `#pragma once`, comments and `#include <ckpt/...>`
# lines) compiles on its own when each header it includes does, and those are all
# checked here; that they also compile together is shown elsewhere (all.hpp is the
# single header the clang build compiles, ckpt.hpp the consumer projects include,
# manager.hpp the tests, mpi.hpp the MPI tests). Skipping them saves a tenth of the time.
umbrellas=()
for h in $headers; do
  if [[ -z $(sed -e 's://.*$::' -e '/^[[:space:]]*$/d' -e '/^#pragma once/d' -e '/^#include <ckpt\//d' "$root/include/$h") ]]; then
    umbrellas+=("$h")
  fi
done
if [[ ${#umbrellas[@]} -gt 0 ]]; then
  echo "umbrella headers, checked through what they include: ${umbrellas[*]}"
  headers=$(grep -vxF -f <(printf '%s\n' "${umbrellas[@]}") <<<"$headers")
fi
total=$(wc -l <<<"$headers")
export CKPT_INCLUDE_DIR="$root/include"
# Each header in its own process, $jobs at a time; a failing one leaves its log.
# The compiler and flags travel as arguments (xargs cannot pass an array).
xargs -P "$jobs" -I{} bash -c '
  out=$1 h=$2; shift 2
  log="$out/${h//\//_}.log"
  extra=()
  [[ $h == ckpt/mpi* ]] && read -ra extra <<<"$CKPT_MPI_CFLAGS"
  [[ $h == ckpt/torch.hpp || $h == ckpt/leaf/torch_* || $h == ckpt/tree/torch_* ]] && read -ra extra <<<"$CKPT_TORCH_CFLAGS"
  [[ $h == ckpt/eigen.hpp || $h == ckpt/leaf/eigen* ]] && read -ra extra <<<"$CKPT_EIGEN_CFLAGS"
  # A header with definitions (`#if CKPT_DEFINE_API` blocks, and the includes they
  # need) is compiled header-only, so that its own includes are shown to cover them. Any
  # other reads the same in both modes and is compiled in separate-compilation mode:
  # there the headers below it bring in the least (no definitions, nor what they
  # include), so a header leaning on one of those fails.
  # src.hpp is the unit of a separate-compilation build and says so when misused.
  if [[ $h == ckpt/src.hpp ]] || ! grep -q "CKPT_DEFINE_API" "$CKPT_INCLUDE_DIR/$h"; then
    extra+=(-DCKPT_SEPARATE_COMPILATION)
  fi
  echo "#include <$h>" | "$@" "${extra[@]}" -x c++ -fsyntax-only - >"$log" 2>&1 || { echo "$h" >>"$out/failed"; }
' _ "$out" {} "$cxx" "${flags[@]}" <<<"$headers"
failed=0
if [[ -f "$out/failed" ]]; then
  while read -r h; do
    echo "FAIL $h:"; sed -n 1,30p "$out/${h//\//_}.log"
  done < <(LC_ALL=C sort "$out/failed")
  failed=$(wc -l <"$out/failed")
fi
echo "$((total - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
