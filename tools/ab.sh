#!/usr/bin/env bash
# tools/ab.sh - A/B timing in rounds: a step's binary and variants of it (`make variant`)
# at the same shapes. Each round runs every contender once per shape, the order turned by
# one from round to round; round 0 checks sampled rows against fp64 and later rounds only
# time (30 launches after 3). Writes the harness's rows with two more columns,
# variant,round, to OUT.csv (a new file), and prints each contender's median over the
# rounds per shape.
# usage: bash tools/ab.sh OUT.csv ROUNDS SHAPES NAME=BINARY [NAME=BINARY ...]
#        bash tools/ab.sh --medians CSV    the medians of a CSV it wrote, printed again
#   SHAPES: a set of reference/shapes.txt (seed, bench, sweep, backward), with harness
#           arguments for every shape after it ("backward --backward"), or the harness
#           arguments of one or more shapes separated by ';' ("--dim 64 --batch 4;--dim 64 --causal")
# With --backward the harness writes two rows per run, the forward's and the backward's
# (step "<name>_backward"): the medians keep them apart, the backward's shape marked "bwd".
# A row is the backward's when its name is another row's name plus _backward, the rule of
# reference/table.awk: step 14's forward row is 14_backward, its backward row 14_backward_backward.
set -uo pipefail
cd "$(dirname "$0")/.."
medians() { # medians CSV "NAME ...": each contender's median per shape, in the order given
  echo "medians over the rounds (ms):"
  awk -F, -v names="$2" '
    FNR == NR { name[$1] = 1; next }
    FNR > 1 { key = "B"$5" H"$6"/"$7" N"$8" d"$10" "$4" c"$11
             # the KV cache (the harness columns page_size and seqlens_k, before variant,round)
             if ($(NF-2) !~ /"$/) key = key ($(NF-3) > 0 ? " page" $(NF-3) : "") ($(NF-2) != "" ? " lens" : "")
             if ($1 ~ /_backward$/ && substr($1, 1, length($1) - 9) in name) key = key " bwd"
             if (!(key in seen)) { seen[key] = 1; order[++n_keys] = key }
             t[key, $(NF-1), ++count[key, $(NF-1)]] = $12 }
    # the median of t[key, v, 1 .. count] (insertion sort: a few rounds)
    function median(key, v,    m, i, j, x, s) {
        m = count[key, v]; if (m == 0) return "-"
        for (i = 1; i <= m; i++) s[i] = t[key, v, i] + 0
        for (i = 2; i <= m; i++) { x = s[i]; for (j = i - 1; j >= 1 && s[j] > x; j--) s[j + 1] = s[j]; s[j + 1] = x }
        return sprintf("%.4f", m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2)
    }
    END { n_v = split(names, v, " ")
          printf "%-38s", "shape"; for (i = 1; i <= n_v; i++) printf " %14s", v[i]; printf "\n"
          for (k = 1; k <= n_keys; k++) { printf "%-38s", order[k]
            for (i = 1; i <= n_v; i++) printf " %14s", median(order[k], v[i]); printf "\n" } }' "$1" "$1"
}
if [ "${1:-}" = --medians ]; then
  csv=${2:?usage: tools/ab.sh --medians CSV}
  [ -f "$csv" ] || { echo "error: tools/ab.sh --medians: '$csv' is not a file (allowed: a CSV tools/ab.sh wrote)" >&2; exit 2; }
  medians "$csv" "$(awk -F, 'NR > 1 && !seen[$(NF-1)]++ { printf "%s ", $(NF-1) }' "$csv")"
  exit 0
fi
csv=${1:?usage: tools/ab.sh OUT.csv ROUNDS SHAPES NAME=BINARY [NAME=BINARY ...]}
rounds=${2:?usage: tools/ab.sh OUT.csv ROUNDS SHAPES NAME=BINARY ...}
set_or_args=${3:?usage: tools/ab.sh OUT.csv ROUNDS SHAPES NAME=BINARY ...}
shift 3
names=() bins=()
for c in "$@"; do names+=("${c%%=*}"); bins+=("${c#*=}"); done
n=${#bins[@]}
[ "$n" -gt 0 ] || { echo "error: tools/ab.sh: no NAME=BINARY contender given" >&2; exit 2; }
[ -e "$csv" ] && { echo "error: tools/ab.sh: OUT.csv '$csv' exists (allowed: a new file; the medians read all its rows)" >&2; exit 2; }

shapes=()
if [[ $set_or_args == -* ]]; then
  IFS=';' read -r -a shapes <<<"$set_or_args"
else
  # shellcheck source=reference/shapes.sh
  . reference/shapes.sh
  set_name=${set_or_args%% *} extra=
  [[ $set_or_args == *" "* ]] && extra=" ${set_or_args#* }"
  while read -r b h hkv nq nk d causal dtype options; do
    # options (page=N, lens=A..B): the harness's --page-size, --seqlens-k
    kv=$(shape_flags "$b $h $hkv $nq $nk $d $causal $dtype $options")
    shapes+=("--batch $b --heads $h --kv-heads $hkv --seqlen-q $nq --seqlen-k $nk --dim $d --dtype $dtype$([ "$causal" = 1 ] && echo " --causal")${kv:+ $kv}$extra")
  done < <(shapes_of "$set_name")
  [ ${#shapes[@]} -gt 0 ] || { echo "error: tools/ab.sh: SHAPES='$set_or_args' names no set of reference/shapes.txt" >&2; exit 2; }
fi

one=$(mktemp)
for ((round = 0; round < rounds; round++)); do
  check=$([ "$round" = 0 ] && echo sample || echo off)
  for shape in "${shapes[@]}"; do
    for ((k = 0; k < n; k++)); do
      j=$(( (k + round) % n ))
      rm -f "$one"
      # shellcheck disable=SC2086
      line=$("${bins[$j]}" $shape --warmup 3 --iters 30 --check "$check" --csv "$one" 2>&1 | tail -n 1)
      case $line in *FAIL*) echo "FAIL ${names[$j]} $shape: $line";; esac
      [ -s "$one" ] || { echo "no result: ${names[$j]} $shape: $line"; continue; }
      [ -f "$csv" ] || head -n 1 "$one" | awk '{print $0",variant,round"}' >"$csv"
      tail -n +2 "$one" | awk -v v="${names[$j]}" -v r="$round" '{print $0","v","r}' >>"$csv"
    done
  done
done
rm -f "$one"
medians "$csv" "${names[*]}"
