#!/usr/bin/env bash
# Run 101: step 12 against step 11 in the same rounds, with three changes to step 12 beside it:
#   read12   main's step 12, the block's last TMA store waited for until it has read its buffer
#            (cp.async.bulk.wait_group.read), not until its writes are done
#   snake12  branch wip/26-snake: that, and under a causal mask the q tiles longest first over
#            every head, dealt to the blocks in rounds, every other round in reverse
#   queue12  branch wip/26-dynamic-schedule (third version): the work queue
# The snake's step 12 is checked first (GPU matrix with every preset, compute-sanitizer); then
# tools/ab.sh, 5 rounds, at the bench set: main's steps 11 and 12 and the three. About ten minutes.
# On this machine beforehand, the branches' files as overlays (the device call carries .ab-base):
#   bash results/2026-11-24-h100-r22/run89.sh --overlays wip/26-snake wip/26-dynamic-schedule
# then on the GPU machine, in a process session of its own (a call's end kills the others):
#   mkdir -p build && setsid nohup bash results/2026-11-28-h200-r29/run101.sh build/run101 >build/run101.out 2>&1 </dev/null &
# usage: bash results/2026-11-28-h200-r29/run101.sh LOGDIR
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
. tools/tree_copy.sh
run_start "${1:?usage: run101.sh LOGDIR}"
ps -o pgid= $$ | tr -d ' ' >"$log/pgid"
# A copy of the tree to build and run in (a device call's sync rewrites the work tree), with
# the branches' kernels beside main's.
tree=$(copy_tree "$PWD/build/tree101") && mkdir -p "$tree/build/ab" || exit 2
cp .ab-base/wip-26-snake/steps/12_persistent/kernel.cu "$tree/build/ab/step12-snake.cu" &&
  cp .ab-base/wip-26-dynamic-schedule/steps/12_persistent/kernel.cu "$tree/build/ab/step12-queue.cu" || { stage "an overlay is missing: stopping"; exit 3; }
cd "$tree" || exit 2
python3 tools/variant_src.py steps/12_persistent/kernel.cu build/ab/step12-read.cu \
  "if (threadIdx.x == WARPGROUP) tma_store_wait_all();" "if (threadIdx.x == WARPGROUP) tma_store_wait_read();" || exit 1
make -s -j16 build/step11/fa2 build/step12/fa2 build/tests/gpu_matrix >"$log/build.log" 2>&1 || { stage "build failed"; exit 1; }
for v in read snake queue; do make -s step=12 variant NAME=${v}12 SRC=build/ab/step12-$v.cu >"$log/build-$v.log" 2>&1 & done
wait
for v in read snake queue; do [ -x build/variants/${v}12/fa2 ] || { stage "variant $v did not build"; exit 1; }; done
stage "built"
check_binaries 12 snake build/variants/snake12/fa2 build/variants/snake12/libfa2.so
bash tools/ab.sh "$log/ab101.csv" 5 bench main11=build/step11/fa2 main12=build/step12/fa2 read12=build/variants/read12/fa2 \
  snake12=build/variants/snake12/fa2 queue12=build/variants/queue12/fa2 >"$log/ab101.log" 2>&1
stage "ab: exit $?"
grep -A20 '^medians' "$log/ab101.log" | tee -a "$log/progress.txt"
stage "done"
