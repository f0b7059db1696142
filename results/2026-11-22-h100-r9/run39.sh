#!/usr/bin/env bash
# Run 39 (H100): step 11 with the causal list sorted by length (q tile outer), checked
# and timed against one variant of it, made as in run 38 (tools/variant_src.py):
#   head-order  the causal list a head's q tiles together (run 38's step 11)
# The GPU matrix on step 11 and compute-sanitizer on it first (tools/check.sh); then the
# timings at the benchmark shapes (tools/ab.sh, three rounds); then Nsight Compute on step 11 and
# head-order at the two long causal shapes. Writes under $OUT (or build/run39).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run39}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
mkdir -p build/ab  # as deep as steps/11_*/: the kernel's includes hold
python3 tools/variant_src.py steps/11_persistent/kernel.cu build/ab/head-order.cu \
"const int m_block = p.causal ? m_blocks - 1 - i / pairs : i % m_blocks;
        const int pair = p.causal ? i % pairs : i / m_blocks;" "const int m_block = p.causal ? m_blocks - 1 - i % m_blocks : i % m_blocks;
        const int pair = i / m_blocks;" || exit 1
make -s variant step=11 NAME=ab11-head-order SRC=build/ab/head-order.cu
bash tools/check.sh "$out/run39" 11
bash tools/ab.sh "$out/run39-ab.csv" 3 bench step11=build/step11/fa2 head-order=build/variants/ab11-head-order/fa2
long=(--batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal)
gqa=(--batch 4 --heads 32 --kv-heads 8 --seqlen 4096 --dim 128 --dtype bf16 --causal)
for v in step11 head-order; do
  bin=build/step11/fa2; [ $v = head-order ] && bin=build/variants/ab11-head-order/fa2
  bash tools/profile.sh $bin "${long[@]}" >"$out/run39-profile-long-causal-$v.txt" 2>&1
  bash tools/profile.sh $bin "${gqa[@]}" >"$out/run39-profile-gqa-causal-$v.txt" 2>&1
done
grep -H -E "gpu__time|hit_rate|hmma" "$out"/run39-profile-*.txt | sed 's/  */ /g'
