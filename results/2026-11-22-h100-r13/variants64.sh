#!/usr/bin/env bash
# Run 64's variants of step 11 (after run 63), built like variants.sh's:
#   noturn64  no turns at the tensor cores at d64: the consumers issue their products
#             whenever they are ready, and the hardware interleaves them (the named
#             barriers of the turns cost every consumer two barrier operations per tile,
#             and at d64 a tile's products are half as long as at d128)
#   noturn    the same at every head dim
set -uo pipefail
cd "$(dirname "$0")/../.."
src=${STEP11_SRC:-steps/11_persistent/kernel.cu}  # step 11 as of the run: STEP11_SRC= a copy of it (README)
mkdir -p build/ab
python3 tools/variant_src.py $src build/ab/noturn.cu \
  '    auto turn_begin = [&] {
        named_barrier_sync(NB::TURN + c, 2 * WARPGROUP);
    };
    auto turn_end = [&](bool last) {
        if (!(last && c == CONSUMERS - 1)) named_barrier_arrive(NB::TURN + (c + 1) % CONSUMERS, 2 * WARPGROUP);
    };' '    constexpr bool TURNS = !(NOTURN_ALL || D == 64);
    auto turn_begin = [&] {
        if constexpr (TURNS) named_barrier_sync(NB::TURN + c, 2 * WARPGROUP);
    };
    auto turn_end = [&](bool last) {
        if constexpr (TURNS)
            if (!(last && c == CONSUMERS - 1)) named_barrier_arrive(NB::TURN + (c + 1) % CONSUMERS, 2 * WARPGROUP);
    };' \
  '        if (c == CONSUMERS - 1) named_barrier_arrive(NB::TURN, 2 * WARPGROUP);' \
  '        if (TURNS && c == CONSUMERS - 1) named_barrier_arrive(NB::TURN, 2 * WARPGROUP);' || exit 1
fail=0
for v in noturn64:0 noturn:1; do
  if make -s variant step=11 NAME=${v%%:*} SRC=build/ab/noturn.cu DEFINES=-DNOTURN_ALL=${v#*:} >/dev/null 2>&1; then
    echo "built ${v%%:*}: $(grep -o '[0-9]* bytes spill stores' build/variants/${v%%:*}/ptxas.txt | sort -u | tr '\n' ' ')"
  else echo "FAIL build ${v%%:*}"; fail=1; fi
done
exit $fail
