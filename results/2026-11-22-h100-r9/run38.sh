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
variant no-snake "start + (round % 2 == 0 ? blockIdx.x : gridDim.x - 1 - blockIdx.x)" "start + blockIdx.x"
variant sections "const int m_index = i % m_blocks, pair = i / m_blocks;" \
"const int pairs = items / m_blocks, group = p.heads_q / p.heads_kv;
        const long long kv_bytes_per_pair = 4LL * p.seqlen_k * p.head_dim / group;
        const int section = kv_bytes_per_pair > 0 ? (int)max(1LL, min((long long)pairs, (25LL << 20) / kv_bytes_per_pair)) : pairs;
        const int per_section = section * m_blocks, first_pair = i / per_section * section;
        const int within = i % per_section, size = min(section, pairs - first_pair);
        const int m_index = within / size, pair = first_pair + within % size;"
variant store-wait "        tma_store_commit();" "        tma_store_commit();
        tma_store_wait_read();"
make -s -j16 build/step11/fa2 >/dev/null
for v in no-snake sections store-wait; do make -s variant step=11 NAME="ab11-$v" SRC="build/ab/$v.cu" & done
wait
echo "built at $(( $(date +%s) - t0 )) s"
bins=(build/step11/fa2 build/variants/ab11-no-snake/fa2 build/variants/ab11-sections/fa2 build/variants/ab11-store-wait/fa2)
names=(step11 no-snake sections store-wait)
# shellcheck source=reference/shapes.sh
. reference/shapes.sh
mapfile -t shapes < <(shapes_of bench)
for round in 0 1 2; do
  for shape in "${shapes[@]}"; do
    read -r b h hkv nq nk d causal dtype <<<"$shape"
    args=(--batch "$b" --heads "$h" --kv-heads "$hkv" --seqlen-q "$nq" --seqlen-k "$nk" --dim "$d" --dtype "$dtype")
    [ "$causal" = 1 ] && args+=(--causal)
    check=off; [ "$round" = 0 ] && check=sample
    for k in 0 1 2 3; do
      j=$(( (k + round) % 4 ))
      rm -f "$out/one.csv"
      line=$("${bins[$j]}" "${args[@]}" --warmup 3 --iters 30 --check $check --csv "$out/one.csv" 2>&1 | tail -n 1)
      case $line in *FAIL*) echo "FAIL ${names[$j]} $shape: $line";; esac
      [ -f "$out/one.csv" ] || { echo "no result: ${names[$j]} $shape: $line"; continue; }
      [ -f "$out/run38-ab.csv" ] || head -n 1 "$out/one.csv" | awk '{print $0",variant,round"}' >"$out/run38-ab.csv"
      tail -n +2 "$out/one.csv" | awk -v v="${names[$j]}" -v r="$round" '{print $0","v","r}' >>"$out/run38-ab.csv"
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
          printf "\n" } }' "$out/run38-ab.csv"
long=(--batch 1 --heads 16 --seqlen 16384 --dim 128 --dtype bf16 --causal)
bash tools/profile.sh build/step11/fa2 "${long[@]}" >"$out/run38-profile-long-causal-step11.txt" 2>&1
bash tools/profile.sh build/variants/ab11-no-snake/fa2 "${long[@]}" >"$out/run38-profile-long-causal-no-snake.txt" 2>&1
bash tools/profile.sh build/step11/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 64 >"$out/run38-profile-d64-step11.txt" 2>&1
grep -H -E "gpu__time|hit_rate|hmma" "$out"/run38-profile-*.txt | sed 's/  */ /g'
echo "all done at $(( $(date +%s) - t0 )) s"
