#!/usr/bin/env bash
# reference/readme_table.sh - rewrites the README's comparison tables from a compare CSV, so
# no number in them is typed by hand. Replaces everything between the lines
#   <!-- compare-table:begin -->  and  <!-- compare-table:end -->
# with the device, the date and the command that measured the rows, one table per benchmark
# shape (reference/shapes.txt) and, when the CSV has the seqlen sweep, a TFLOP/s-by-seqlen table.
# A CSV of `make compare SHAPES=decode` rewrites the lines between
#   <!-- decode-table:begin -->  and  <!-- decode-table:end -->
# instead: one table per decode shape, in GB/s and % of the bandwidth-*.csv beside it (a
# paged or mixed-length KV cache's shape, shapes.txt's options, a table of its own).
# A CSV with FlashAttention-4's rows (fa4, fa4_backward: compare.sh where flash_attn.cute
# imports) rewrites the lines between
#   <!-- fa4-table:begin -->  and  <!-- fa4-table:end -->
# instead: the bench set's tables from its forward rows, then the backward set's from its
# backward rows (a forward run and a backward run may share the one CSV), each with "vs FA4".
# A CSV of `make compare SHAPES=backward` (it holds backward rows: table.awk says which rows
# are) rewrites the lines between
#   <!-- backward-table:begin -->  and  <!-- backward-table:end -->
# instead: one table per backward shape, from the backward rows alone (TFLOP/s counting 2.5
# forwards, against torch's backward per backend, % of the ceiling of the instruction a row runs).
#
# With --summary, the README's one table instead, from a CSV of `make compare SHAPES=summary`,
# between  <!-- summary-table:begin -->  and  <!-- summary-table:end -->: a row per step (what
# it adds: its page's title; what it runs on: the Makefile's lists), each at its headline shape
# (table.awk's mode=front: the forward steps at the summary set's prefill shape, the decode
# steps, those that take a KV cache, at its decode shape, the backward steps at the backward
# set's first shape), against torch's cuDNN and FA2 backends measured in the same rounds.
#
# usage: bash reference/readme_table.sh [--summary] [CSV [README]]
#   CSV: default the newest results/compare/compare-*.csv; its ceiling is the ceiling-*.csv
#   (and bandwidth-*.csv) beside it.
#   README: the page to rewrite (default README.md with --summary, else docs/results-h200.md).
set -euo pipefail
summary=0
if [ "${1:-}" = --summary ]; then summary=1; shift; fi
cd "$(dirname "$0")/.."
# shellcheck source=reference/shapes.sh
. reference/shapes.sh

csv=${1:-}
if [ -z "$csv" ]; then
  for f in results/compare/compare-*.csv results/compare-*.csv; do
    if [ -e "$f" ] && { [ -z "$csv" ] || [ "$f" -nt "$csv" ]; }; then csv=$f; fi
  done
fi
readme=${2:-$([ $summary = 1 ] && echo README.md || echo docs/results-h200.md)}
if [ -z "$csv" ] || [ ! -f "$csv" ]; then
  echo "error: readme_table.sh: no compare CSV ('${csv:-results/compare-*.csv}'): run make compare first" >&2
  exit 2
fi
ceiling_csv=$(dirname "$csv")/$(basename "$csv" | sed 's/^compare-/ceiling-/')
bandwidth_csv=$(dirname "$csv")/$(basename "$csv" | sed 's/^compare-/bandwidth-/')
gpu=$(awk -F, 'FNR > 1 && $2 != "CPU" { g = $2 } END { print g }' "$csv")
dates=$(awk -F, 'FNR > 1 { if (f == "" || $3 < f) f = $3; if ($3 > l) l = $3 } END { print (f == l ? f : f " to " l) }' "$csv")
# The steps that run wgmma, the Makefile's one list (table.awk holds them to wgmma's ceiling,
# every other GPU step to mma.sync's).
wgmma_steps=$(make -s --no-print-directory hopper-steps 2>/dev/null || true)
# A probe's fp16 TFLOP/s in the ceiling CSV, rounded ("" without it); the streaming-read GB/s in
# the bandwidth CSV; the rounds, the most rows one GPU contender has at one shape (a KV cache's
# rows, page_size and seqlens_k after the quoted key change, are shapes of their own).
ceiling_of() { awk -F, -v probe="$1" '$1 == probe && $4 == "fp16" { t = $5 } END { if (t != "") printf "%.0f", t }' "$ceiling_csv" 2>/dev/null || true; }
bandwidth_of() { awk -F, '$1 == "stream_read" { g = $4 } END { print g }' "$bandwidth_csv" 2>/dev/null || true; }
rounds_of() {
  awk -F, 'FNR > 1 && $2 != "CPU" && $19 != "UNSUPPORTED" { kv = NF >= 22 && $NF !~ /"$/ ? "," $(NF - 1) "," $NF : ""
                                                           n[$1 "," $4 "," $5 "," $6 "," $7 "," $8 "," $9 "," $10 "," $11 kv]++ }
           END { for (k in n) if (n[k] > m) m = n[k]; print m + 0 }' "$csv"
}

need_markers() { # need_markers MARKER: the page holds its begin and end lines, once each
  begin="<!-- $1:begin -->" end="<!-- $1:end -->"
  if [ "$(grep -cxF "$begin" "$readme")" != 1 ] || [ "$(grep -cxF "$end" "$readme")" != 1 ]; then
    echo "error: readme_table.sh: $readme needs the lines '$begin' and '$end', once each" >&2
    exit 2
  fi
}
splice() { # splice BLOCK: the page with the lines between $begin and $end replaced by BLOCK's
  awk -v begin="$begin" -v end="$end" -v block="$1" '
    $0 == begin { print; while ((getline line < block) > 0) print line; skip = 1; next }
    $0 == end { skip = 0 }
    !skip' "$readme" >"$1.readme"
  cat "$1.readme" >"$readme"
}

if [ $summary = 1 ]; then
  need_markers summary-table
  info=$(mktemp) block=$(mktemp)
  trap 'rm -f "$info" "$block" "$block.readme"' EXIT
  tma_steps=$(make -s --no-print-directory tma-steps 2>/dev/null || true)
  decode_steps=""
  for dir in steps/[0-9][0-9]_*; do
    compgen -G "$dir/kernel.c*" >/dev/null || continue
    id=$(basename "$dir" | cut -c1-2)
    page=docs/$(basename "$dir").md
    # what it adds: the page's title after "Step NN: ", up to its dash
    adds=$(sed -n '1s/^# Step [0-9][0-9]: *//p' "$page" 2>/dev/null | sed 's/ *—.*//')
    if [ "$id" = 00 ]; then runs=CPU
    elif [[ " $wgmma_steps " == *" $id "* ]]; then runs="H100, H200"
    elif [[ " $tma_steps " == *" $id "* ]]; then runs="sm_90+"
    else runs="sm_80+"; fi
    [ "$id" != 00 ] && ! grep -q fa2_refuse_kv_cache "$dir"/kernel.c* && decode_steps+=" $id"
    printf '%s\t%s\t%s\t%s\n' "$id" "${adds:-$(basename "$dir" | cut -c4-)}" "$runs" "$page" >>"$info"
  done
  prefill=$(shapes_of summary | awk 'NR == 1')
  decode=$(shapes_of summary | awk '$4 == 1' | head -n 1)
  bwd=$(shapes_of backward | head -n 1)
  label() { awk '{ printf "%s B%s H%s%s N%s%s d%s%s", $8, $1, $2, ($3 != $2 ? " Hkv" $3 : ""), ($4 == $5 ? $4 : "q" $4 " Nk" $5), "", $6, ($7 == 1 ? " causal" : "") }' <<<"$1"; }
  gbps=$(bandwidth_of) mma=$(ceiling_of mma_sync_m16n8k16) wgmma=$(ceiling_of wgmma_m64n256k16) rounds=$(rounds_of)
  {
    echo "<!-- written by reference/readme_table.sh from $csv: edit that, not this -->"
    echo "Measured on **$gpu**, $dates, with \`make compare SHAPES=summary\` in $rounds rounds: each time the median over"
    echo "the rounds of each round's median launch, L2 flushed before each launch, torch measured in the same rounds."
    echo "The forward steps at $(label "$prefill"); the decode step at $(label "$decode") (GB/s of K and V);"
    echo "the backward steps at $(label "$bwd"), their backward (TFLOP/s count 2.5 forwards) against torch's backward."
    echo "Ceilings measured in the same run: mma.sync ${mma:-?} and wgmma ${wgmma:-?} TFLOP/s (fp16, \`$ceiling_csv\`),"
    echo "streaming read ${gbps:-?} GB/s (\`$bandwidth_csv\`)."
    grep -q ',UNCHECKED,' "$csv" && echo "UNCHECKED: timed but not compared with the fp64 reference at this shape (too slow on the CPU); \`make test\` checks every step over its matrix."
    echo
    awk -v mode=front -v front_info="$info" -v decode_steps="$decode_steps" -v wgmma_steps="$wgmma_steps" \
        -v front_shapes="$prefill;$decode;$bwd" -v ceiling_csv="$ceiling_csv" -v bandwidth_csv="$bandwidth_csv" \
        -f reference/table.awk "$csv"
  } >"$block"
  splice "$block"
  echo "readme_table.sh: $readme's table rewritten from $csv ($gpu, $dates)"
  exit 0
fi

# Which shapes the run took: sweep rows mean SHAPES=all, other rows beyond the seed SHAPES=bench,
# rows at a decode shape SHAPES=decode; the rounds are the most rows one contender has at one shape.
has_rows_of() { # has_rows_of SET OTHER: does the CSV hold a row at a shape of SET that OTHER lacks?
  shapes_of "$1" | while read -r b h hkv nq nk d c dt _options; do
    shapes_of "$2" | grep -qxF "$b $h $hkv $nq $nk $d $c $dt" && continue
    awk -F, -v s="$dt,$b,$h,$hkv,$nq,$nk,$d,$c" 'FNR > 1 && $4 "," $5 "," $6 "," $7 "," $8 "," $9 "," $10 "," $11 == s { f = 1 }
      END { exit !f }' "$csv" && echo yes && break
  done | grep -q yes
}
table=compare
has_rows_of decode seed && table=decode
[ "$(awk -v mode=count_backward -f reference/table.awk "$csv")" -gt 0 ] && table=backward
grep -qE '^fa4(_backward)?,' "$csv" && table=fa4
shapes=$(shapes_of "$(case $table in compare|fa4) echo bench ;; *) echo $table ;; esac)")
need_markers "$table-table"
command='make compare'
if [ $table = decode ]; then command='make compare SHAPES=decode'
elif [ $table = backward ]; then command='make compare SHAPES=backward'
elif [ $table = fa4 ]; then
  # the steps each run timed (compare.sh's STEPS), from the rows: the forward's, the backward's
  steps_of() { awk -F, -v bwd="$1" 'FNR > 1 && $1 ~ /^[0-9][0-9]_/ && ($1 ~ /_backward$/) == bwd { print substr($1, 1, 2) }' "$csv" |
                 sort -u | paste -sd, -; }
  # ... and the torch backends and FA4 it timed (compare.sh's BACKENDS), named where not all
  backends_of() {
    local names
    names=$(awk -F, -v bwd="$1" 'FNR > 1 && ($1 ~ /^torch_sdpa_/ || $1 ~ /^fa4/) && ($1 ~ /_backward$/) == bwd {
              n = $1; sub(/^torch_sdpa_/, "", n); sub(/_backward$/, "", n); seen[n] = 1 }
            END { n_all = split(all_names, all, " ")
                  for (i = 1; i <= n_all; i++) if (all[i] in seen) { out = out sep all[i]; sep = " "; k++ }
                  if (k < n_all) print out }' all_names="$COMPARE_BACKENDS" "$csv")
    [ -z "$names" ] || echo "BACKENDS=\"$names\" "
  }
  command="STEPS=$(steps_of 0) $(backends_of 0)make compare SHAPES=bench\` and \`STEPS=$(steps_of 1) $(backends_of 1)make compare SHAPES=backward"
elif has_rows_of sweep bench; then command='make compare SHAPES=all'; elif has_rows_of bench seed; then command='make compare SHAPES=bench'; fi
rounds=$(rounds_of)
[ $table = decode ] && [ -f "$bandwidth_csv" ] || bandwidth_csv=""
ceiling_note=""
if [ $table = decode ]; then
  gbps=$(bandwidth_of)
  [ -n "$gbps" ] && ceiling_note="; streaming-read bandwidth $gbps GB/s from \`$bandwidth_csv\`"
elif [ -f "$ceiling_csv" ]; then
  mma=$(ceiling_of mma_sync_m16n8k16) wgmma=$(ceiling_of wgmma_m64n256k16)
  [ -n "$mma" ] && ceiling_note="; mma.sync m16n8k16 ceiling (fp16) $mma TFLOP/s"
  [ -n "$wgmma" ] && ceiling_note="$ceiling_note, wgmma m64n256k16 ceiling (fp16) $wgmma TFLOP/s"
  [ -n "$ceiling_note" ] && ceiling_note="$ceiling_note from \`$ceiling_csv\`"
fi
ceiling_rule=""
if [ $table != decode ] && [ -n "${wgmma:-}" ]; then
  if [ -n "$wgmma_steps" ]; then
    ceiling_rule="A step's row gives the share of the ceiling of the instruction it runs: wgmma's for steps $(echo $wgmma_steps | sed 's/ /, /g') (\`make hopper-steps\`), mma.sync's for the other GPU steps (step 01, which runs neither, included); the cuBLAS and torch rows, whose instructions are their own, give both."
  else
    ceiling_rule="Every row gives both ceilings' shares (\`make hopper-steps\` did not answer: which steps run wgmma is not known here)."
  fi
fi

block=$(mktemp)
trap 'rm -f "$block" "$block.readme"' EXIT
{
  echo "<!-- written by reference/readme_table.sh from $csv: edit that, not this -->"
  echo "Measured on **$gpu**, $dates, with \`$command\` in $rounds round$([ "$rounds" = 1 ] || echo s) (rows: \`$csv\`$ceiling_note)."
  echo "Each time is the median over the rounds of each round's median launch time; ratios are speed ratios to torch SDPA"
  echo "measured in the same rounds (above 1: faster than torch)."
  [ -z "$ceiling_rule" ] || echo "$ceiling_rule"
  if [ $table = fa4 ]; then
    echo "The forward at the bench shapes the run reached:"
    awk -v mode=markdown -v ceiling_csv="$ceiling_csv" -v shapes="$(echo "$shapes" | tr '\n' ';')" \
        -v wgmma_steps="$wgmma_steps" -f reference/table.awk "$csv"
    echo
    echo "The backward at the backward shapes it reached (the backward's alone; TFLOP/s count 2.5 forwards):"
    awk -v mode=markdown -v backward=1 -v ceiling_csv="$ceiling_csv" -v shapes="$(shapes_of backward | tr '\n' ';')" \
        -v wgmma_steps="$wgmma_steps" -f reference/table.awk "$csv"
  elif [ $table = backward ]; then
    echo "The times are the backward's alone (dQ, dK, dV from Q, K, V, O, LSE and dO; torch's: autograd.grad of a forward run"
    echo "before the timing), against torch's backward per backend; TFLOP/s count 2.5 forwards, as FA2 and FA3 count a backward."
    awk -v mode=markdown -v backward=1 -v ceiling_csv="$ceiling_csv" -v shapes="$(echo "$shapes" | tr '\n' ';')" \
        -v wgmma_steps="$wgmma_steps" -f reference/table.awk "$csv"
  elif [ $table = decode ]; then
    awk -v mode=markdown -v bandwidth_csv="$bandwidth_csv" -v shapes="$(echo "$shapes" | tr '\n' ';')" \
        -v decode="$(shapes_of decode | tr '\n' ';')" -f reference/table.awk "$csv"
  else
    awk -v mode=markdown -v ceiling_csv="$ceiling_csv" -v shapes="$(echo "$shapes" | tr '\n' ';')" \
        -v sweep="$(shapes_of sweep | tr '\n' ';')" -v wgmma_steps="$wgmma_steps" \
        -f reference/table.awk "$csv"
  fi
} >"$block"
splice "$block"
echo "readme_table.sh: $readme tables rewritten from $csv ($gpu, $dates)"
