#!/usr/bin/env bash
# Run 38 (H100): step 11 A/B. Builds three variants of steps/11_persistent/kernel.cu
# with `make variant` (each made below by replacing one piece of the source, which
# must be found), then times the step and its variants at the benchmark shapes,
# every contender once per round, order rotated, three rounds (--check sample on the
# first round: a variant must also be correct):
#   no-snake    block k takes items k, k + G, ... (no turning back in odd rounds)
#   sections    FlashAttention-3's order: (batch, head) pairs cut into L2 sections
#               (K and V of a section in half of a 50 MB L2), q tiles outer inside one
#   store-wait  the epilogue waits for its O store at once, as step 10 (no overlap)
# Then Nsight Compute on step 11 and no-snake at the long causal shape, and on step
# 11 at B4 H16 N4096 d64. Writes under $OUT (or build/run38).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run38}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
src=steps/11_persistent/kernel.cu
mkdir -p build/ab  # as deep as steps/11_*/: the kernel's includes hold
python3 tools/variant_src.py $src build/ab/no-snake.cu \
  "start + (round % 2 == 0 ? blockIdx.x : gridDim.x - 1 - blockIdx.x)" "start + blockIdx.x" || exit 1
python3 tools/variant_src.py $src build/ab/sections.cu "const int m_index = i % m_blocks, pair = i / m_blocks;" \
"const int pairs = items / m_blocks, group = p.heads_q / p.heads_kv;
        const long long kv_bytes_per_pair = 4LL * p.seqlen_k * p.head_dim / group;
        const int section = kv_bytes_per_pair > 0 ? (int)max(1LL, min((long long)pairs, (25LL << 20) / kv_bytes_per_pair)) : pairs;
        const int per_section = section * m_blocks, first_pair = i / per_section * section;
        const int within = i % per_section, size = min(section, pairs - first_pair);
        const int m_index = within / size, pair = first_pair + within % size;" || exit 1
python3 tools/variant_src.py $src build/ab/store-wait.cu "        tma_store_commit();" "        tma_store_commit();
        tma_store_wait_read();" || exit 1
make -s -j16 build/step11/fa2 >/dev/null
for v in no-snake sections store-wait; do make -s variant step=11 NAME="ab11-$v" SRC="build/ab/$v.cu" & done
wait
bash tools/ab.sh "$out/run38-ab.csv" 3 bench step11=build/step11/fa2 no-snake=build/variants/ab11-no-snake/fa2 \
  sections=build/variants/ab11-sections/fa2 store-wait=build/variants/ab11-store-wait/fa2
long=(--batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal)
bash tools/profile.sh build/step11/fa2 "${long[@]}" >"$out/run38-profile-long-causal-step11.txt" 2>&1
bash tools/profile.sh build/variants/ab11-no-snake/fa2 "${long[@]}" >"$out/run38-profile-long-causal-no-snake.txt" 2>&1
bash tools/profile.sh build/step11/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 64 >"$out/run38-profile-d64-step11.txt" 2>&1
grep -H -E "gpu__time|hit_rate|hmma" "$out"/run38-profile-*.txt | sed 's/  */ /g'
