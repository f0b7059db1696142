#!/usr/bin/env bash
# Why run 63's "skip" variant was slower at every shape, even where no consumer is ever
# idle, and what run 66 changed: counts, in the SASS of step 11 as runs 63-66 ran it
# (commit 52d7089, taken from git), of its "skip" variant (variants.sh) and of step 11
# today (skip with the consumer index from a shuffle), the instructions, those on the
# uniform datapath (U... opcodes: computed once per warp, as the wgmma descriptors are)
# and the R2UR moves from ordinary registers to uniform ones.
# Needs git and cuobjdump (the full CUDA Toolkit; CUOBJDUMP=... names another). No GPU.
# usage: bash sass_uniform.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
mkdir -p build/ab
git show 52d7089:steps/11_persistent/kernel.cu >build/ab/step11_r63.cu
make -s variant step=11 NAME=r63 SRC=build/ab/step11_r63.cu >/dev/null
STEP11_SRC=build/ab/step11_r63.cu bash results/2026-11-22-h100-r13/variants.sh >/dev/null
make -s variant step=11 NAME=today >/dev/null
for kernel in '_Z16fa2_wgmma_kernelI6__halfLi128E6ConfigILi128ELi2EEEv10fa2_params14CUtensorMap_stS4_S4_S4_:fp16 d128, 2 consumers' \
              '_Z16fa2_wgmma_kernelI6__halfLi64E6ConfigILi64ELi3EEEv10fa2_params14CUtensorMap_stS4_S4_S4_:fp16 d64, 3 consumers'; do
  for v in r63 skip today; do
    "$CUOBJDUMP" -sass -fun "${kernel%%:*}" build/variants/$v/kernel.o |
      grep -E '^\s+/\*[0-9a-f]{4}\*/' | sed -E 's/^\s+\/\*[0-9a-f]+\*\/\s+//; s/;.*//' |
      awk -v name="${kernel#*:}" -v v="$v" '{ n++ } /^(@!?U?P[0-9T] )?U[A-Z]/ { u++ } /R2UR/ { r++ }
        END { printf "%-22s %-5s %5d instructions, %4d uniform-datapath, %4d R2UR\n", name, v, n, u, r }'
  done
done
