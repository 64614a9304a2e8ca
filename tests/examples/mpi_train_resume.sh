#!/bin/sh
# examples/mpi/mpi_train.cpp as docs/distributed.md runs it: 20 steps on 2 ranks, then
# resumed on 3 ranks up to step 40, against one uninterrupted run on 1 rank. The resumed
# run must say it resumed after step 15 (saves every 5 steps) and end with the same
# global embedding as the uninterrupted one: the state came back exactly, onto another
# split of its rows.
#
#   mpi_train_resume.sh MPI_TRAIN WORK_DIR MPIEXEC [MPIEXEC_FLAGS...]
set -eu
bin=$1
work=$2
shift 2
rm -rf "$work"
mkdir -p "$work"
"$@" -np 2 "$bin" "$work/run" 20 > "$work/first.txt"
"$@" -np 3 "$bin" "$work/run" 40 > "$work/resumed.txt"
"$@" -np 1 "$bin" "$work/straight" 40 > "$work/straight.txt"
cat "$work/first.txt" "$work/resumed.txt" "$work/straight.txt"
grep -q "^resumed from step 15 on 3 ranks" "$work/resumed.txt" || { echo "FAIL: the second run did not resume from step 15 on 3 ranks"; exit 1; }
sum() { sed -n 's/^step 40 on [0-9]* ranks: sum of the embedding \([^,]*\),.*/\1/p' "$1"; }
resumed=$(sum "$work/resumed.txt")
straight=$(sum "$work/straight.txt")
[ -n "$resumed" ] && [ "$resumed" = "$straight" ] || { echo "FAIL: resumed run ends at '$resumed', uninterrupted at '$straight'"; exit 1; }
rm -rf "$work"
echo "ok: resumed on 3 ranks and uninterrupted on 1 both end at $resumed"
