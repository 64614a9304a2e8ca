#!/usr/bin/env bash
# fuzz/run.sh BUILD_DIR SECONDS [TARGET...] — runs each libFuzzer target for SECONDS.
#
# Seeds come from BUILD_DIR/fuzz/make_seeds (checkpoints saved by ckpt itself) into
# BUILD_DIR/fuzz-seeds/<target>/; the corpus each run grows is kept in
# BUILD_DIR/fuzz-corpus/<target>/ (later runs start from it), findings go to
# BUILD_DIR/fuzz-findings/<target>/. Inputs up to 1 MiB, the format's dictionary.
# Prints executions and findings per target; exits 1 when a target found something in
# this run (findings of earlier runs stay in the folder, to replay, and are not counted).
# A slow unit counts only when it is slow again replayed alone (see run_one).
# FUZZ_JOBS (default 1) runs that many targets at once; FUZZ_NICE (default 0) is
# the niceness they run at.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
seconds=${2:?usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=()
  for f in "$here"/targets/*.hpp; do targets+=("$(basename "$f" .hpp)"); done
fi
jobs=${FUZZ_JOBS:-1}
niceness=${FUZZ_NICE:-0}

bin="$build/fuzz"
rm -rf "$build/fuzz-seeds"
"$bin/make_seeds" "$build/fuzz-seeds" >/dev/null || { echo "fuzz: make_seeds failed" >&2; exit 2; }

run_one() {
  local t=$1
  local dict="$here/dict/$t.dict"
  [ -f "$dict" ] || dict=
  local corpus="$build/fuzz-corpus/$t" findings="$build/fuzz-findings/$t" log="$build/fuzz-logs/$t.log"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  # Findings of earlier runs stay (to replay them) but are not this run's: count what
  # this run writes, newer than a stamp taken now.
  local stamp="$log.start"
  touch "$stamp"
  # -timeout: a single input taking longer is a hang; -rss_limit_mb: a reader that
  # allocates out of proportion to a 1 MiB input is a finding too.
  nice -n "$niceness" "$bin/fuzz_$t" "$corpus" "$build/fuzz-seeds/$t" \
    ${dict:+-dict="$dict"} -max_len=1048576 -max_total_time="$seconds" -timeout=25 \
    -rss_limit_mb=2560 -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$findings/" \
    >"$log" 2>&1
  local rc=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  # libFuzzer keeps an input that took over 10 s of wall-clock time as slow-unit-*,
  # which a loaded machine also produces (a target at FUZZ_NICE=19 beside a build took
  # 21 s for an input it replays alone in 0.2 s). Each is replayed alone: slow again
  # (over 10 s), it stays a finding; else it moves to $build/fuzz-logs/slow-under-load/.
  local slow start took
  while IFS= read -r slow; do
    start=$(date +%s%N)
    timeout 60 "$bin/fuzz_$t" -timeout=25 -artifact_prefix="$findings/" "$slow" >/dev/null 2>&1
    took=$((($(date +%s%N) - start) / 1000000))
    if [ "$took" -lt 10000 ]; then
      mkdir -p "$build/fuzz-logs/slow-under-load"
      mv "$slow" "$build/fuzz-logs/slow-under-load/$t-$(basename "$slow")"
      echo "fuzz: $t: $(basename "$slow") was slow under load; alone it took $took ms: not counted"
    fi
  done < <(find "$findings" -type f -name 'slow-unit-*' -newer "$stamp")
  local found
  found=$(find "$findings" -type f -newer "$stamp" | wc -l)
  printf 'fuzz: %-14s %10s executions in %ss, corpus %5s inputs, %s findings (exit %s)\n' \
    "$t" "${execs:-?}" "$seconds" "$(find "$corpus" -type f | wc -l)" "$found" "$rc"
  if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
    echo "fuzz: $t: see $log and $findings" >&2
    return 1
  fi
}

status=0
running=0
for t in "${targets[@]}"; do
  if [ ! -x "$bin/fuzz_$t" ]; then echo "fuzz: no target $bin/fuzz_$t" >&2; status=1; continue; fi
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit "$status"
