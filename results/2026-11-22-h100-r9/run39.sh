#!/usr/bin/env bash
# Run 39 (H100): step 11 with the causal list sorted by length (q tile outer), checked
# and timed against one variant of it, made as in run 38:
#   head-order  the causal list a head's q tiles together (run 38's step 11)
# The GPU matrix on step 11 and compute-sanitizer on it first (in parallel); then the
# timings at the benchmark shapes, every contender once per round, order rotated,
# three rounds (--check sample on the first); then Nsight Compute on step 11 and
# head-order at the two long causal shapes. Writes under $OUT (or build/run39).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-build/run39}; mkdir -p "$out"
t0=$(date +%s)
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma  # folders the device may still hold from before a rename
src=steps/11_persistent/kernel.cu
mkdir -p build/ab
variant() { # variant NAME OLD NEW: $src with OLD replaced by NEW
  python3 - "$src" "build/ab/$1.cu" "$2" "$3" <<'PY'
import sys
src, dst, old, new = sys.argv[1:]
text = open(src).read()
assert text.count(old) == 1, f"{dst}: the text to replace is not in {src} exactly once"
open(dst, "w").write(text.replace(old, new))  # build/ab/ is as deep as steps/11_*/: the includes hold
PY
}
variant head-order "const int m_block = p.causal ? m_blocks - 1 - i / pairs : i % m_blocks;
        const int pair = p.causal ? i % pairs : i / m_blocks;" "const int m_block = p.causal ? m_blocks - 1 - i % m_blocks : i % m_blocks;
        const int pair = i / m_blocks;"
make -s -j16 build/tests/gpu_matrix build/step11/fa2 build/step11/libfa2.so >/dev/null
make -s variant step=11 NAME=ab11-head-order SRC=build/ab/head-order.cu
echo "built at $(( $(date +%s) - t0 )) s"
bash tools/sanitize.sh build/step11/fa2 >"$out/run39-sanitize-step11.txt" 2>&1 &
build/tests/gpu_matrix build/step11/libfa2.so >"$out/run39-gpu-matrix.log" 2>&1
echo "matrix rc $? at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run39-gpu-matrix.log") passed, $(grep -c '^FAIL' "$out/run39-gpu-matrix.log") failed"
grep -E '^FAIL' "$out/run39-gpu-matrix.log" | head -8
wait
echo "sanitize at $(( $(date +%s) - t0 )) s: $(grep -c '^PASS' "$out/run39-sanitize-step11.txt") passed, $(grep -c '^FAIL' "$out/run39-sanitize-step11.txt") failed"
bins=(build/step11/fa2 build/variants/ab11-head-order/fa2)
names=(step11 head-order)
# shellcheck source=reference/shapes.sh
. reference/shapes.sh
mapfile -t shapes < <(shapes_of bench)
for round in 0 1 2; do
  for shape in "${shapes[@]}"; do
    read -r b h hkv nq nk d causal dtype <<<"$shape"
    args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen-q "$nq" --seqlen-k "$nk" --dim "$d" --dtype "$dtype")
    [ "$causal" = 1 ] && args+=(--causal)
    check=off; [ "$round" = 0 ] && check=sample
    for k in 0 1; do
      j=$(( (k + round) % 2 ))
      rm -f "$out/one.csv"
      line=$("${bins[$j]}" "${args[@]}" --warmup 3 --iters 30 --check $check --csv "$out/one.csv" 2>&1 | tail -n 1)
      case $line in *FAIL*) echo "FAIL ${names[$j]} $shape: $line";; esac
      [ -f "$out/one.csv" ] || { echo "no result: ${names[$j]} $shape: $line"; continue; }
      [ -f "$out/run39-ab.csv" ] || head -n 1 "$out/one.csv" | awk '{print $0",variant,round"}' >"$out/run39-ab.csv"
      tail -n +2 "$out/one.csv" | awk -v v="${names[$j]}" -v r="$round" '{print $0","v","r}' >>"$out/run39-ab.csv"
    done
  done
done
rm -f "$out/one.csv"
echo "timed at $(( $(date +%s) - t0 )) s; medians of the three rounds (ms):"
awk -F, 'NR > 1 { key = "B"$5" H"$6"/"$7" N"$8" d"$10" "$4" c"$11; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
  t[key, $(NF-1), $NF] = $12; vs[$(NF-1)] = 1 }
  END { printf "%-34s", "shape"; for (v in vs) printf " %11s", v; printf "\n"
        for (i = 1; i <= n; i++) { printf "%-34s", order[i]
          for (v in vs) { a = t[order[i], v, 0]; b = t[order[i], v, 1]; c = t[order[i], v, 2]
            m = (a > b) ? ((b > c) ? b : ((a > c) ? c : a)) : ((a > c) ? a : ((b > c) ? c : b)); printf " %11.4f", m }
          printf "\n" } }' "$out/run39-ab.csv"
long=(--batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal)
gqa=(--batch 4 --heads 32 --kv-heads 8 --seqlen 4096 --dim 128 --dtype bf16 --causal)
for v in step11 head-order; do
  bin=build/step11/fa2; [ $v = head-order ] && bin=build/variants/ab11-head-order/fa2
  bash tools/profile.sh $bin "${long[@]}" >"$out/run39-profile-long-causal-$v.txt" 2>&1
  bash tools/profile.sh $bin "${gqa[@]}" >"$out/run39-profile-gqa-causal-$v.txt" 2>&1
done
grep -H -E "gpu__time|hit_rate|hmma" "$out"/run39-profile-*.txt | sed 's/  */ /g'
echo "all done at $(( $(date +%s) - t0 )) s"
