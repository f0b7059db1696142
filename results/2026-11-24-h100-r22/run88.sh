#!/usr/bin/env bash
# Run 88: step 14's backward main kernel against the variants of bwd_variants.py (its header:
# what each changes, the SASS, the predictions). Everything runs in a copy of the tree,
# build/combo, and writes only to LOGDIR, which should lie under build/ as well: the sync between
# device calls keeps build/ but may remove files a stage leaves in the repository root. tools/ab.sh
# writes its CSV straight into LOGDIR, row by row. Start it in a process session of its own, or
# the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r22/run88.sh build/run88 bwdab bwdmatrix >build/run88.out 2>&1 </dev/null &
# Estimated on an H100 with 16 cores: the builds under a minute, bwdab about 3 to 4 minutes (5
# contenders x 6 shapes x 3 rounds, 90 harness runs of 33 launches each), bwdmatrix 2 to 4
# minutes (one gpu_matrix pass: each case's reference once, 4 libraries checked against it).
#   bwdab         the variants (bwd_variants.py -> build/ab/14_NAME.cu, `make variant`, side by
#                 side) against step 14 as it is: tools/ab.sh, 3 rounds, the six backward shapes
#                 of reference/shapes.txt with --backward; the medians of the rows marked "bwd"
#                 are the backward's (the forward is the same kernel in all)
#   bwdmatrix     build/tests/gpu_matrix on every variant's libfa2.so: a variant's time counts
#                 only if its matrix passes (PASS/FAIL counts per variant in progress.txt)
#   bwdprof=NAME  NAME (a variant, or s14 for step 14 itself) at B4 H16 N4096 d128 fp16 with
#                 --backward: tools/profile.sh on its first 4 kernels (forward, prep, main,
#                 convert: the convert kernel is one that walk_red_v4 changes), then the main
#                 kernel's per-SASS-opcode stall samples (tools/sass_stalls.py) and, per memory
#                 opcode, L1 tag requests and L2 sectors (the REDG pattern the variants change)
# usage: bash results/2026-11-24-h100-r22/run88.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
log=$(realpath -m "${1:?usage: run88.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
stage "tree: commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git here)')"
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C build/combo
cd build/combo || exit 2
# Only what the stages run: step 14 (the A/B's baseline), gpu_matrix, the harness the variants link.
make -s -j16 build/step14/fa2 build/step14/libfa2.so build/tests/gpu_matrix harness >"$log/build.log" 2>&1; stage "built: exit $?"
variants=$(python3 results/2026-11-24-h100-r22/bwd_variants.py --list)
built=
build_variants() { # once: the sources, then the variants side by side (one nvcc each), their ptxas lines
  [ -n "$built" ] && return; built=1
  python3 results/2026-11-24-h100-r22/bwd_variants.py >"$log/variants-build.log" 2>&1 || stage "  bwd_variants.py: exit $?"
  for n in $variants; do
    ( make -s variant step=14 NAME="$n" SRC=build/ab/14_"$n".cu >"$log/variant-$n-build.log" 2>&1; echo $? >"$log/variant-$n-build.rc" ) &
  done
  wait
  for n in $variants; do
    stage "  variant $n: make exit $(cat "$log/variant-$n-build.rc"); fa2_bwd_kernel<__half,128,BwdTile<8,128>,2>: $(grep -A3 "fa2_bwd_kernelI6__halfLi128E7BwdTileILi8ELi128EELi2E" build/variants/"$n"/ptxas.txt |
      grep -o '[0-9]* bytes spill stores\|Used [0-9]* registers' | tr '\n' ' ')"
    cp build/variants/"$n"/ptxas.txt "$log/ptxas-$n.txt" 2>/dev/null
  done
}
for what in "$@"; do
  case $what in
    bwdab)
      stage "A/B: step 14's backward against its variants ($variants), 3 rounds, backward shapes"
      build_variants
      contenders=(s14=build/step14/fa2)
      for n in $variants; do [ -x build/variants/"$n"/fa2 ] && contenders+=("$n=build/variants/$n/fa2"); done
      rm -f "$log/bwdab.csv"
      bash tools/ab.sh "$log/bwdab.csv" 3 "backward --backward" "${contenders[@]}" >"$log/bwdab.log" 2>&1; stage "  exit $?"
      grep -E '^shape|bwd$|bwd |FAIL|no result' "$log/bwdab.log" | tee -a "$log/progress.txt" ;;
    bwdmatrix)
      stage "GPU matrix of the variants ($variants)"
      build_variants
      libs=()
      for n in $variants; do [ -f build/variants/"$n"/libfa2.so ] && libs+=(build/variants/"$n"/libfa2.so); done
      build/tests/gpu_matrix "${libs[@]}" >"$log/bwdmatrix.log" 2>&1; stage "  gpu_matrix exit $?"
      for n in $variants; do
        p=$(grep -c "^PASS 14_$n " "$log/bwdmatrix.log") f=$(grep -c "^FAIL 14_$n " "$log/bwdmatrix.log")
        if [ "$f" -gt 0 ]; then verdict=FAIL; elif [ "$p" -gt 0 ]; then verdict=PASS; else verdict="NO RESULT"; fi
        stage "  14_$n: $verdict ($p cases passed, $f failed); $(grep "^[A-Z]* 14_$n: " "$log/bwdmatrix.log" | tail -n 1)"
        grep "^FAIL 14_$n " "$log/bwdmatrix.log" | head -n 5 | tee -a "$log/progress.txt"
      done
      gzip -f "$log/bwdmatrix.log" ;;
    bwdprof=*)
      n=${what#bwdprof=}
      if [ "$n" = s14 ]; then bin=build/step14/fa2; else build_variants; bin=build/variants/$n/fa2; fi
      [ -x "$bin" ] || { stage "bwdprof: no binary for '$n' (allowed: s14 $variants)"; continue; }
      stage "profile of $n"
      args="--batch 4 --heads 16 --seqlen 4096 --dim 128 --backward"
      # shellcheck disable=SC2086
      KERNELS=4 bash tools/profile.sh "$bin" $args >"$log/profile-$n.log" 2>&1; stage "  metrics: exit $?"
      # shellcheck disable=SC2086
      ncu --clock-control none --kernel-name regex:fa2_bwd_kernel --launch-count 1 --section SourceCounters -f \
        -o "$log/src-$n" "$bin" $args --iters 1 --warmup 0 --check off >"$log/src-$n.log" 2>&1
      ncu -i "$log/src-$n.ncu-rep" --page source --csv --print-source sass >"$log/src-$n.csv" 2>>"$log/src-$n.log"
      python3 tools/sass_stalls.py "$log/src-$n.csv" 30 >"$log/stalls-$n.txt" 2>&1; stage "  stalls: exit $?"
      python3 - "$log/src-$n.csv" >"$log/lsu-$n.txt" 2>&1 <<'PY'
# Per memory opcode of the main kernel: instructions executed, L1 tag requests (global), L2
# sectors (global, its ideal, local) and the stall samples, with the per-instruction ratios.
import collections, csv, re, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
at = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
head = rows[at]
col = {h: i for i, h in enumerate(head)}
names = ["Instructions Executed", "L1 Tag Requests Global", "L2 Theoretical Sectors Global",
         "L2 Theoretical Sectors Global Ideal", "L2 Theoretical Sectors Local", "Warp Stall Sampling (All Samples)", "stall_lg"]
sums = collections.defaultdict(collections.Counter)
for r in rows[at + 1:]:
    if len(r) < len(head) or not r[col["Source"]].strip():
        continue
    op = re.sub(r"^@!?U?P\w+\s+", "", r[col["Source"]].strip()).split()[0]
    if not re.match(r"(RED|ATOM|LDG|STG|LDL|STL|LDGSTS)", op):
        continue
    for n in names:
        if n in col:
            sums[op][n] += int(r[col[n]].replace(",", "") or 0)
print(f"{'opcode':40s} {'executed':>11s} {'L1 tag req':>11s} {'L2 sectors':>11s} {'(ideal)':>11s} {'L2 local':>10s} {'samples':>8s} {'lg':>8s}  tag/inst sect/inst")
for op, c in sorted(sums.items(), key=lambda kv: -kv[1]["Warp Stall Sampling (All Samples)"]):
    e = c["Instructions Executed"] or 1
    print(f"{op:40s} {c[names[0]]:11d} {c[names[1]]:11d} {c[names[2]]:11d} {c[names[3]]:11d} {c[names[4]]:10d} {c[names[5]]:8d} {c[names[6]]:8d}"
          f"  {c[names[1]] / e:8.2f} {c[names[2]] / e:9.2f}")
PY
      stage "  lsu: exit $?: $(grep -m 1 '^RED' "$log/lsu-$n.txt" | tr -s ' ')"
      rm -f "$log/src-$n.ncu-rep"; gzip -f "$log/src-$n.csv" ;;
    *) stage "unknown stage $what (allowed: bwdab bwdmatrix bwdprof=NAME)" ;;
  esac
done
stage "done"
