#!/usr/bin/env bash
# Run 40 (H100): step 11 with units of equal work (a causal unit is q tiles
# m_blocks - 1 - k and k of one head), checked (the GPU matrix and compute-sanitizer
# on step 11) and timed at the benchmark shapes against step 10 and two earlier
# schedulers of step 11, rebuilt from their commits with `make variant`:
#   head-snake    009f807: one q tile per item, a head's tiles together, snake rounds
#   sorted-snake  8188a73: the same, but causal items q tile outer (sorted by length)
# Every contender once per round, order rotated, three rounds (--check sample on the
# first); then Nsight Compute on step 11 at the three causal benchmark shapes.
# Writes under $OUT (or build/run40).
# As it ran on the device, whose copy of the tree has no git history, `git show`
# found neither commit: the two variants were not built, and run 40 timed step 11
# against step 10 only (run 39 holds the same-run A/B of the two earlier orders).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run40}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
mkdir -p build/ab
git show 009f807:steps/11_persistent/kernel.cu >build/ab/head-snake.cu    # build/ab/ is as deep as steps/11_*/:
git show 8188a73:steps/11_persistent/kernel.cu >build/ab/sorted-snake.cu  # the includes hold
make -s -j16 build/tests/gpu_matrix build/step10/fa2 build/step11/fa2 build/step11/libfa2.so >/dev/null
for v in head-snake sorted-snake; do make -s variant step=11 NAME="ab11-$v" SRC="build/ab/$v.cu" & done
wait
echo "built at $(( $(date +%s) - t0 )) s"
bash tools/sanitize.sh build/step11/fa2 >"$out/run40-sanitize-step11.txt" 2>&1 &
build/tests/gpu_matrix build/step11/libfa2.so >"$out/run40-gpu-matrix.log" 2>&1
echo "matrix rc $? at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run40-gpu-matrix.log") passed, $(grep -c '^FAIL' "$out/run40-gpu-matrix.log") failed"
grep -E '^FAIL' "$out/run40-gpu-matrix.log" | head -8
wait
echo "sanitize at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run40-sanitize-step11.txt") passed, $(grep -c '^FAIL' "$out/run40-sanitize-step11.txt") failed"
bins=(build/step11/fa2 build/step10/fa2 build/variants/ab11-head-snake/fa2 build/variants/ab11-sorted-snake/fa2)
names=(step11 step10 head-snake sorted-snake)
n=${#bins[@]}
# shellcheck source=reference/shapes.sh
. reference/shapes.sh
mapfile -t shapes < <(shapes_of bench)
for round in 0 1 2; do
  for shape in "${shapes[@]}"; do
    read -r b h hkv nq nk d causal dtype <<<"$shape"
    args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen-q "$nq" --seqlen-k "$nk" --dim "$d" --dtype "$dtype")
    [ "$causal" = 1 ] && args+=(--causal)
    check=off; [ "$round" = 0 ] && check=sample
    for k in $(seq 0 $((n - 1))); do
      j=$(( (k + round) % n ))
      rm -f "$out/one.csv"
      line=$("${bins[$j]}" "${args[@]}" --warmup 3 --iters 30 --check $check --csv "$out/one.csv" 2>&1 | tail -n 1)
      case $line in *FAIL*) echo "FAIL ${names[$j]} $shape: $line";; esac
      [ -f "$out/one.csv" ] || { echo "no result: ${names[$j]} $shape: $line"; continue; }
      [ -f "$out/run40-ab.csv" ] || head -n 1 "$out/one.csv" | awk '{print $0",variant,round"}' >"$out/run40-ab.csv"
      tail -n +2 "$out/one.csv" | awk -v v="${names[$j]}" -v r="$round" '{print $0","v","r}' >>"$out/run40-ab.csv"
    done
  done
done
rm -f "$out/one.csv"
echo "timed at $(( $(date +%s) - t0 )) s; medians of the three rounds (ms):"
awk -F, 'NR > 1 { key = "B"$5" H"$6"/"$7" N"$8" d"$10" "$4" c"$11; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
  t[key, $(NF-1), $NF] = $12; vs[$(NF-1)] = 1 }
  END { printf "%-34s", "shape"; for (v in vs) printf " %12s", v; printf "\n"
        for (i = 1; i <= n; i++) { printf "%-34s", order[i]
          for (v in vs) { a = t[order[i], v, 0]; b = t[order[i], v, 1]; c = t[order[i], v, 2]
            m = (a > b) ? ((b > c) ? b : ((a > c) ? c : a)) : ((a > c) ? a : ((b > c) ? c : b)); printf " %12.4f", m }
          printf "\n" } }' "$out/run40-ab.csv"
bash tools/profile.sh build/step11/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --causal >"$out/run40-profile-causal-step11.txt" 2>&1
bash tools/profile.sh build/step11/fa2 --batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal >"$out/run40-profile-long-causal-step11.txt" 2>&1
bash tools/profile.sh build/step11/fa2 --batch 4 --heads 32 --kv-heads 8 --seqlen 4096 --dim 128 --dtype bf16 --causal >"$out/run40-profile-gqa-causal-step11.txt" 2>&1
grep -H -E "gpu__time|hit_rate|hmma" "$out"/run40-profile-*.txt | sed 's/  */ /g'
echo "all done at $(( $(date +%s) - t0 )) s"
