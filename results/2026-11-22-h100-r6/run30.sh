#!/usr/bin/env bash
# Run 30 (H100): make test on the split steps; Nsight Compute on steps 05 and 06 (the staged
# epilogue alone) at the seed and the big shape; the planted bugs, now in step 07.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run30}; mkdir -p "$out"
t0=$(date +%s)
make test > "$out/run30-make-test.log" 2>&1; echo "make test rc $? at $(( $(date +%s) - t0 )) s"; tail -n 1 "$out/run30-make-test.log"
cp build/test-logs/gpu-matrix.log "$out/run30-gpu-matrix.log"
for s in 05 06 07; do
  for shape in "seed:" "big:--batch 4 --heads 16 --seqlen 4096 --dim 128"; do
    # shellcheck disable=SC2086
    make -s step=$s profile ARGS="${shape#*:}" > "$out/run30-profile-${shape%%:*}-step$s.txt" 2>&1
  done
done
echo "profiles done at $(( $(date +%s) - t0 )) s"
bash tests/mutants.sh > "$out/run30-mutants.txt" 2>&1; cat "$out/run30-mutants.txt"
echo "all done at $(( $(date +%s) - t0 )) s"
