#!/usr/bin/env bash
# Run 66's variants of step 11 (after run 63's "skip" lost at every shape: its branch moved
# the wgmma descriptors off the uniform datapath, sass_uniform.sh), built like variants.sh's:
#   cshfl    the consumer index c taken from lane 0 by a shuffle: the compiler then knows it
#            is the same in every lane of a warp (it is: a warpgroup is four whole warps)
#   skip_s   run 63's skip (a consumer with no row past seqlen_q keeps the protocol and
#            skips the work; variants.sh builds it) with the same c
set -uo pipefail
cd "$(dirname "$0")/../.."
src=${STEP11_SRC:-steps/11_persistent/kernel.cu}  # step 11 as of the run: STEP11_SRC= a copy of it (README)
mkdir -p build/ab
c_old='    const int c = threadIdx.x / WARPGROUP - 1;  // this consumer, 0 .. CONSUMERS - 1'
c_new='    const int c = __shfl_sync(0xffffffffu, (int)threadIdx.x / WARPGROUP - 1, 0);  // this consumer, uniform in the warp'
fail=0
build() {  # NAME SRC
  if make -s variant step=11 NAME="$1" SRC="$2" >/dev/null 2>&1; then
    echo "built $1: $(grep -o '[0-9]* bytes spill stores' "build/variants/$1/ptxas.txt" | sort -u | tr '\n' ' ')"
  else echo "FAIL build $1"; fail=1; fi
}
python3 tools/variant_src.py $src build/ab/cshfl.cu "$c_old" "$c_new" && build cshfl build/ab/cshfl.cu
# run 63's skip, as variants.sh writes it, with the same c
bash results/2026-11-22-h100-r13/variants.sh >/dev/null  # writes build/ab/skip.cu from the same src
python3 tools/variant_src.py build/ab/skip.cu build/ab/skip_s.cu "$c_old" "$c_new" && build skip_s build/ab/skip_s.cu
exit $fail
