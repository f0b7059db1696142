#!/usr/bin/env bash
# Run 66's variants of step 11 (after run 63's "skip" lost at every shape: its branch moved
# the wgmma descriptors off the uniform datapath, sass_uniform.sh), built like variants.sh's:
#   cshfl    the consumer index c taken from lane 0 by a shuffle: the compiler then knows it
#            is the same in every lane of a warp (it is: a warpgroup is four whole warps)
#   skip_s   run 63's skip (a consumer with no row past seqlen_q keeps the protocol and
#            skips the work) with the same c
set -uo pipefail
cd "$(dirname "$0")/../.."
src=${STEP11_SRC:-steps/11_persistent/kernel.cu}  # step 11 as of the run: STEP11_SRC= a copy of it (README)
mkdir -p build/ab
c_old='    const int c = threadIdx.x / WARPGROUP - 1;  // this consumer, 0 .. CONSUMERS - 1'
c_new='    const int c = __shfl_sync(0xffffffffu, (int)threadIdx.x / WARPGROUP - 1, 0);  // this consumer, uniform in the warp'
skip_old='    mbarrier_wait(bars.q_full(), (uint32_t)(ordinal & 1));
'
skip_new='    mbarrier_wait(bars.q_full(), (uint32_t)(ordinal & 1));
    if (w.m0 + c * WG_M >= p.seqlen_q) {  // no row of this consumer exists: keep the protocol, skip the work
        if (w.n_blocks == 0) release(bars.q_empty());
        if (w.n_blocks == 0) return;
        if (c == CONSUMERS - 1) named_barrier_arrive(NB::TURN, 2 * WARPGROUP);
#pragma unroll 1
        for (int n = 0; n < w.n_blocks; n++) {
            mbarrier_wait(bars.k_full(stage_of(n)), parity_of(n));  // a release must not run ahead of its phase
            turn_begin();
            turn_end(false);
            release_after_s(n);
            mbarrier_wait(bars.v_full(stage_of(n)), parity_of(n));
            release(bars.v_empty(stage_of(n)));
        }
        turn_begin();
        turn_end(true);
        return;
    }
'
fail=0
build() {  # NAME SRC
  if make -s variant step=11 NAME="$1" SRC="$2" >/dev/null 2>&1; then
    echo "built $1: $(grep -o '[0-9]* bytes spill stores' "build/variants/$1/ptxas.txt" | sort -u | tr '\n' ' ')"
  else echo "FAIL build $1"; fail=1; fi
}
python3 tools/variant_src.py $src build/ab/cshfl.cu "$c_old" "$c_new" && build cshfl build/ab/cshfl.cu
python3 tools/variant_src.py $src build/ab/skip_s.cu "$c_old" "$c_new" "$skip_old" "$skip_new" && build skip_s build/ab/skip_s.cu
exit $fail
