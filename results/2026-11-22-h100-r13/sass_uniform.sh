#!/usr/bin/env bash
# Why run 63's "skip" variant was slower at every shape, even where no consumer is ever
# idle: counts, in the SASS of step 11 and of the variant (variants.sh builds it), the
# instructions, those on the uniform datapath (U... opcodes: computed once per warp, as
# the wgmma descriptors are) and the R2UR moves from ordinary registers to uniform ones.
# Needs cuobjdump (the full CUDA Toolkit; CUOBJDUMP=... names another). No GPU needed.
# usage: bash sass_uniform.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CUOBJDUMP=${CUOBJDUMP:-cuobjdump}
make -s variant step=11 NAME=base >/dev/null
[ -f build/variants/skip/kernel.o ] || bash results/2026-11-22-h100-r13/variants.sh >/dev/null
for kernel in '_Z16fa2_wgmma_kernelI6__halfLi128E6ConfigILi128ELi2EEEv10fa2_params14CUtensorMap_stS4_S4_S4_:fp16 d128, 2 consumers' \
              '_Z16fa2_wgmma_kernelI6__halfLi64E6ConfigILi64ELi3EEEv10fa2_params14CUtensorMap_stS4_S4_S4_:fp16 d64, 3 consumers'; do
  for v in base skip; do
    "$CUOBJDUMP" -sass -fun "${kernel%%:*}" build/variants/$v/kernel.o |
      grep -E '^\s+/\*[0-9a-f]{4}\*/' | sed -E 's/^\s+\/\*[0-9a-f]+\*\/\s+//; s/;.*//' |
      awk -v name="${kernel#*:}" -v v="$v" '{ n++ } /^(@!?U?P[0-9T] )?U[A-Z]/ { u++ } /R2UR/ { r++ }
        END { printf "%-22s %-5s %5d instructions, %4d uniform-datapath, %4d R2UR\n", name, v, n, u, r }'
  done
done
