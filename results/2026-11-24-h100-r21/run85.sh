#!/usr/bin/env bash
# Run 85: step 14's backward against variants of it that attack run 84's measured stalls
# (results/2026-11-24-h100-r21/README.md: what each changes and predicts). The tree is
# copied to build/combo (with the files under .ab-base/combo/ laid over it, if any, as
# run84.sh) and built there. Start it in a session of its own, or the device call's end kills it:
#   mkdir -p build && setsid nohup bash results/2026-11-24-h100-r21/run85.sh build/run85 bwdab bwdmatrix test compare >build/run85.out 2>&1 </dev/null &
#   bwdab      the variants (bwd_variants.py -> build/ab/14_NAME.cu, `make variant`) against
#              step 14 as it is, tools/ab.sh in 3 rounds at the six backward shapes of
#              reference/shapes.txt with --backward: the medians of the rows marked "bwd"
#              are the backward's (the others are the forward, the same kernel in all)
#   bwdmatrix  build/tests/gpu_matrix on every variant's libfa2.so: a variant's time counts
#              only if its matrix passes
#   bwdshared  (optional, about a minute) which instructions make run 84's 13.5% of
#              shared-load wavefronts "bank conflicts": ncu's per-instruction excessive
#              shared wavefronts of step 14's main kernel, summed per opcode (every LDSM
#              and STS address pattern of the kernel is conflict-free by the swizzle: README)
#   test       make test, alone (nothing runs beside it)
#   compare    make compare SHAPES=bench
#   decode     make compare SHAPES=decode (the paged rows and the mixed-length batch)
#   backward   make compare SHAPES=backward
#   mutants    MUTANT_STEPS=13 tests/mutants.sh (counter_not_reset, empty_range_not_counted)
# usage: bash results/2026-11-24-h100-r21/run85.sh LOGDIR STAGE...  (on the GPU machine, from the repo root)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=$(realpath -m "${1:?usage: run85.sh LOGDIR STAGE...}"); shift
mkdir -p "$log"
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
rm -rf build/combo && mkdir -p build/combo
tar --exclude=./build --exclude=./.ab-base -cf - . | tar -xf - -C build/combo
[ -d .ab-base/combo ] && cp -r .ab-base/combo/. build/combo/
cd build/combo
make -s -j16 all >"$log/build.log" 2>&1; stage "built: exit $?"
variants=$(python3 results/2026-11-24-h100-r21/bwd_variants.py --list)
built=
build_variants() { # once: the sources, then the variants side by side (one nvcc each), their ptxas lines
  [ -n "$built" ] && return; built=1
  python3 results/2026-11-24-h100-r21/bwd_variants.py >"$log/variants-build.log" 2>&1 || stage "  bwd_variants.py: exit $?"
  for n in $variants; do
    ( make -s variant step=14 NAME="$n" SRC=build/ab/14_"$n".cu >"$log/variant-$n-build.log" 2>&1; echo $? >"$log/variant-$n-build.rc" ) &
  done
  wait
  for n in $variants; do
    stage "  variant $n: make exit $(cat "$log/variant-$n-build.rc"); fa2_bwd_kernel<__half,128,2>: $(grep -A3 "fa2_bwd_kernelI6__halfLi128ELi2E" build/variants/"$n"/ptxas.txt |
      grep -o '[0-9]* bytes spill stores\|Used [0-9]* registers' | tr '\n' ' ')"
    cp build/variants/"$n"/ptxas.txt "$log/ptxas-$n.txt" 2>/dev/null
  done
}
compare_set() { # compare_set SET NAME [ENV=VALUE]: make compare SHAPES=SET, its CSVs into $log/NAME
  rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv
  (env ${3:+"$3"} PYTHONUNBUFFERED=1 make -s compare SHAPES="$1") >"$log/compare-$2.log" 2>&1; stage "  $2: exit $?"
  mkdir -p "$log/$2"; cp results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv "$log/$2/" 2>/dev/null
}
for what in "$@"; do
  case $what in
    bwdab)
      stage "A/B: step 14's backward and its variants ($variants), 3 rounds, backward shapes"
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
        stage "  14_$n: $(grep -c "^PASS 14_$n " "$log/bwdmatrix.log") PASS, $(grep -c "^FAIL 14_$n " "$log/bwdmatrix.log") FAIL; $(grep "^[A-Z]* 14_$n: " "$log/bwdmatrix.log" | tail -n 1)"
      done
      gzip -f "$log/bwdmatrix.log" ;;
    bwdshared)
      stage "step 14's backward: excessive shared wavefronts per SASS opcode"
      # shellcheck disable=SC2086
      ncu --clock-control none --kernel-name regex:fa2_bwd_kernel --launch-count 1 --section SourceCounters -f \
        -o "$log/shared-step14" build/step14/fa2 --batch 4 --heads 16 --seqlen 4096 --dim 128 --backward \
        --iters 1 --warmup 0 --check off >"$log/shared.log" 2>&1
      ncu -i "$log/shared-step14.ncu-rep" --page source --csv --print-source sass >"$log/shared-step14.csv" 2>>"$log/shared.log"
      python3 - "$log/shared-step14.csv" >"$log/shared-step14.txt" 2>&1 <<'PY'
import collections, csv, re, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
at = next(i for i, r in enumerate(rows) if "Source" in r and "Address" in r)
head = rows[at]
cols = [i for i, h in enumerate(head) if "Shared" in h and ("Excessive" in h or "Ideal" in h or h.startswith("L1 Wavefronts Shared"))]
src = head.index("Source")
sums = collections.defaultdict(collections.Counter)
for r in rows[at + 1:]:
    if len(r) <= src or not r[src].strip():
        continue
    op = re.sub(r"^@!?U?P\w+\s+", "", r[src].strip()).split(" ")[0]
    for i in cols:
        try:
            sums[op][head[i]] += float(r[i].replace(",", "") or 0)
        except ValueError:
            pass
names = [head[i] for i in cols]
print("opcode," + ",".join(names))
for op, c in sorted(sums.items(), key=lambda kv: -max(kv[1].values(), default=0)):
    if any(c.values()):
        print(op + "," + ",".join(f"{c[n]:.0f}" for n in names))
PY
      stage "  exit $?: $(head -n 4 "$log/shared-step14.txt" | tr '\n' ';')"
      rm -f "$log/shared-step14.ncu-rep"; gzip -f "$log/shared-step14.csv" ;;
    test)
      stage "make test (alone)"
      make test >"$log/make-test.log" 2>&1; stage "  make test exit $? : $(tail -n 1 "$log/make-test.log")"
      grep -E '^(FAIL|SKIP) ' "$log/make-test.log" | head -n 40 | tee -a "$log/progress.txt"
      gzip -c build/test-logs/gpu-matrix.log >"$log/gpu-matrix.log.gz" 2>/dev/null
      cat build/test-logs/sanitize-*.log 2>/dev/null | gzip -c >"$log/sanitize.log.gz" ;;
    compare) stage "make compare SHAPES=bench"; compare_set bench bench ;;
    decode) stage "make compare SHAPES=decode (paged and mixed-length rows)"; compare_set decode decode ;;
    backward) stage "make compare SHAPES=backward"; compare_set backward backward ;;
    mutants)
      stage "mutants of step 13"
      MUTANT_STEPS=13 bash tests/mutants.sh >"$log/mutants.log" 2>&1
      stage "  $(grep -c '^PASS' "$log/mutants.log") caught, $(grep -c '^FAIL' "$log/mutants.log") not" ;;
    *) stage "unknown stage $what" ;;
  esac
done
stage "done"
