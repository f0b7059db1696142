#!/usr/bin/env bash
# The test runner behind `make test`. Every case prints PASS, FAIL or SKIP;
# the last line is "N passed, N failed, N skipped" and any failure makes the
# exit code non-zero. The GPU part runs only where a GPU answers.
set -u
cd "$(dirname "$0")/.."
LOG=build/test-logs
run_t0=$SECONDS  # each program's line says how long it took and when it ended: where a run's time goes
mkdir -p "$LOG"
pass=0 fail=0 skip=0

result() { # result PASS|FAIL|SKIP "name" ["detail"]
  case $1 in PASS) pass=$((pass+1));; FAIL) fail=$((fail+1));; SKIP) skip=$((skip+1));; esac
  if [ "$1" = PASS ]; then echo "PASS $2"; else echo "$1 $2${3:+: $3}"; fi
}

# Counts the PASS/FAIL/SKIP lines a test program printed; shows all but passes.
count_lines() { # count_lines LOGFILE
  local p f s
  p=$(grep -c '^PASS ' "$1"); f=$(grep -c '^FAIL ' "$1"); s=$(grep -c '^SKIP ' "$1")
  pass=$((pass+p)); fail=$((fail+f)); skip=$((skip+s))
  grep -E '^(FAIL|SKIP|#) ' "$1"
  echo "  ($p passed, $f failed, $s skipped: $1)"
}

# expect_error RC NAME COMMAND...: bad input or a missing GPU must give exit code RC,
# exactly one line on stderr starting "error: ", and nothing on stdout.
expect_error() {
  local want=$1 name=$2; shift 2
  "$@" >"$LOG/cli.out" 2>"$LOG/cli.err"
  local rc=$? lines out
  lines=$(wc -l <"$LOG/cli.err"); out=$(wc -c <"$LOG/cli.out")
  if [ $rc -eq "$want" ] && [ "$lines" -eq 1 ] && [ "$out" -eq 0 ] && grep -q '^error: ' "$LOG/cli.err"; then
    result PASS "$name -> $(cat "$LOG/cli.err")"
  else
    result FAIL "$name" "exit $rc (want $want), $lines stderr lines, $out stdout bytes: $(head -c 200 "$LOG/cli.err")"
  fi
}

# expect_pass NAME COMMAND...: a harness run must exit 0 and print a PASS line.
expect_pass() {
  local name=$1 out; shift
  if out=$("$@" 2>&1) && echo "$out" | grep -q '| PASS'; then result PASS "$name"
  else result FAIL "$name" "$out"; fi
}

run_program() { # run_program NAME COMMAND...: a program that prints PASS/FAIL lines, and its seconds
  local name=$1 t0=$SECONDS; shift
  echo "== $name"
  "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  count_lines "$LOG/$name.log"
  echo "  ($name: $((SECONDS - t0)) s, $((SECONDS - run_t0)) s into the run)"
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$LOG/$name.log"; then
    result FAIL "$name exited with $rc and no FAIL line" "$(tail -n 3 "$LOG/$name.log" | tr '\n' ' ')"
  fi
}

echo "== build: harness, step 00, test programs"
if make -s -j"$(nproc)" build/step00/fa2 build/step00/libfa2.so test-programs >"$LOG/build-cpu.log" 2>&1; then
  result PASS "build harness, step 00 and the test programs"
else
  result FAIL "build harness, step 00 and the test programs" "see $LOG/build-cpu.log"
  tail -n 20 "$LOG/build-cpu.log"
  echo "$pass passed, $fail failed, $skip skipped"; exit 1
fi

run_program cpu-step00 build/tests/test_cpu
run_program kv-cache-step00 build/tests/test_paged
run_program backward build/tests/test_backward
run_program backward-fragments python3 tests/test_bwd_fragments.py
run_program dq-staging python3 tests/test_dq_staging.py
run_program wgmma-dq-order python3 tests/test_wgmma_dq_order.py
run_program bwd-block-order python3 tests/test_bwd_block_order.py
run_program checker build/tests/test_checker
# every planted bug of tests/mutants.sh still finds its text in its step's kernel (no GPU)
run_program mutant-texts bash tests/mutants.sh --texts
run_program scratch bash scratch/test.sh
if make -s scratch >"$LOG/make-scratch.log" 2>&1; then result PASS "make scratch (every layout program with its default arguments)"
else result FAIL "make scratch" "see $LOG/make-scratch.log"; fi
# Every committed figure is current: its data (a scratch program's output) and its script
# are those it was drawn from (no matplotlib needed).
run_program figures python3 figures/make.py --check
# Every step and concept page can be read in one sitting (tools/check_pages.py: the word and line
# budgets, a figure, a folded answer, an experiment, no run or issue numbers), the README in a
# minute, and every link resolves, a glossary entry's too.
run_program pages python3 tools/check_pages.py
# ... and the checker fails a page over its budget, a README too long, a glossary entry that is
# not there and a run named by number (a copy of the pages with each planted)
pages_tree=$LOG/pages-tree
rm -rf "$pages_tree" && mkdir -p "$pages_tree" && cp -r README.md docs "$pages_tree"/
for d in *; do [ -e "$pages_tree/$d" ] || ln -s "$PWD/$d" "$pages_tree/$d"; done  # what the pages link to
(cd "$pages_tree" && for i in $(seq 400); do echo "more words to read, four"; done >>docs/03_swizzle.md &&
 seq 200 >>README.md && echo "See [m-tile](../glossary.md#no-such-term) and run 12." >>docs/measurements/03_swizzle.md &&
 python3 "$OLDPWD/tools/check_pages.py" >"$LOG/pages-planted.log" 2>&1)
[ $? = 1 ] && grep -q '^FAIL step page docs/03_swizzle.md: [0-9]* words outside code blocks' "$LOG/pages-planted.log" &&
  grep -q '^FAIL README.md: [0-9]* lines' "$LOG/pages-planted.log" &&
  grep -q '^FAIL links of docs/measurements/03_swizzle.md: .*glossary.md#no-such-term' "$LOG/pages-planted.log" &&
  grep -q "^FAIL docs/: a run or an issue named by number at docs/measurements/03_swizzle.md" "$LOG/pages-planted.log" &&
  result PASS "check_pages.py fails planted pages: words over budget, a long README, a missing glossary entry, a run number" ||
  result FAIL "check_pages.py on planted pages" "$(grep FAIL "$LOG/pages-planted.log" | head -n 4)"

echo "== harness input errors: one line on stderr, nothing on stdout, exit code 2"
bad_inputs=(
  "--batch 0" "--batch x" "--heads -1" "--heads 8 --kv-heads 3" "--seqlen 0" "--seqlen-q 5x" "--dim 0"
  "--dtype fp32" "--check maybe" "--iters 0" "--warmup -2" "--scale nan" "--seed" "--frobnicate"
  "--causal=1" "positional" "--csv=" "--seqlen 64 --seqlen-q 32" "--seqlen-k 32 --seqlen 64"
  "--batch 2 --batch 3" "--causal --causal" "--csv $LOG/no-such-dir/out.csv"
  "--backward --backward" "--backward=1"
  "--page-size 48" "--page-size 8" "--page-size 512" "--page-size 16 --page-size 32"
  "--batch 2 --seqlens-k 1,2,3" "--batch 2 --seqlens-k 5" "--batch 2 --seqlens-k 5,x" "--batch 2 --seqlens-k 5,"
  "--batch 2 --seqlen-k 100 --seqlens-k 5,101" "--batch 2 --seqlens-k -1,5"
  "--batch 2 --seqlens-k 5,7 --backward" "--page-size 16 --backward"
  "--page-order sequential" "--page-size 16 --page-order random" "--page-size 16 --page-order"
)
for args in "${bad_inputs[@]}"; do
  # shellcheck disable=SC2086
  expect_error 2 "bad input '$args'" build/step00/fa2 $args
done
expect_error 2 "step 00 refuses --dim 300" build/step00/fa2 --dim 300
expect_error 2 "the GPU matrix refuses step 00's CPU library" build/tests/gpu_matrix build/step00/libfa2.so
expect_error 2 "a test program refuses FA2_TEST_FAIL_LIMIT=x" env FA2_TEST_FAIL_LIMIT=x build/tests/test_checker
# --csv is opened before any work: a path that cannot be written stops a large run at once.
start=$(date +%s)
expect_error 2 "an unwritable --csv stops the run before any work" build/step00/fa2 --seqlen 16384 --csv "$LOG/no-such-dir/x.csv"
[ $(( $(date +%s) - start )) -le 2 ] && result PASS "... within 2 s" || result FAIL "an unwritable --csv took $(( $(date +%s) - start )) s to refuse"

echo "== runtime failures: one line on stderr with the reason, exit code 4"
expect_error 4 "a problem larger than this machine's memory" build/step00/fa2 --seqlen 1048576 --heads 1024
# a failed host allocation, made to fail by a 300 MB address-space limit (Q alone needs 537 MB)
expect_error 4 "a host allocation that fails" bash -c "ulimit -v 300000; exec build/step00/fa2 --batch 8 --seqlen 16384 --heads 16 --check off"
if build/step00/fa2 --help | grep -q '4 a host allocation or a CUDA call failed'; then result PASS "--help lists the exit codes"
else result FAIL "--help lists the exit codes"; fi

echo "== step 00 through the harness binary"
for args in "--seqlen 100 --heads 2 --batch 1" "--seqlen-q 33 --seqlen-k 150 --causal --dtype bf16 --dim 64 --heads 4 --kv-heads 1" \
            "--seqlen-q 150 --seqlen-k 33 --causal --check full" "--seqlen 70 --scale 4 --heads 2" \
            "--seqlen 300 --heads 2 --scale 30" "--seqlen 300 --heads 2 --scale 100" \
            "--seqlen 300 --heads 2 --scale 30 --dtype bf16" "--seqlen 300 --heads 2 --scale 100 --dtype bf16"; do
  # shellcheck disable=SC2086
  expect_pass "step 00 $args" build/step00/fa2 $args --iters 1
done
# a KV cache: per-sequence lengths (0, 1, a page boundary, all), K and V in shuffled pages
for args in "--batch 4 --seqlen-q 4 --seqlen-k 300 --seqlens-k 0,1,64,300 --causal --page-size 64 --kv-heads 2" \
            "--batch 3 --seqlen-q 1 --seqlen-k 600 --seqlens-k 17,0,600 --page-size 16 --dtype bf16 --heads 4 --kv-heads 1" \
            "--batch 2 --seqlen 200 --page-size 256 --causal --check full" "--batch 2 --seqlen-q 3 --seqlen-k 90 --seqlens-k 90,3" \
            "--batch 3 --seqlen-q 1 --seqlen-k 600 --seqlens-k 17,0,600 --page-size 16 --page-order sequential"; do
  # shellcheck disable=SC2086
  expect_pass "step 00 $args" build/step00/fa2 $args --iters 1
done
# the CSV records the KV cache in its last two columns (page_size, seqlens_k joined by ';'),
# after the quoted key change; a dense run writes 0 and nothing
rm -f "$LOG/kv.csv"
build/step00/fa2 --batch 3 --seqlen-q 1 --seqlen-k 600 --seqlens-k 17,0,600 --page-size 16 --iters 1 --csv "$LOG/kv.csv" >/dev/null 2>&1
build/step00/fa2 --batch 2 --seqlen 64 --iters 1 --csv "$LOG/kv.csv" >/dev/null 2>&1
if [ "$(head -n 1 "$LOG/kv.csv" | grep -o ',key_change,page_size,seqlens_k$')" = ",key_change,page_size,seqlens_k" ] &&
   sed -n 2p "$LOG/kv.csv" | grep -q '^00_cpu_reference,CPU,.*,3,8,8,1,600,128,0,.*,PASS,".*",16,17;0;600$' &&
   sed -n 3p "$LOG/kv.csv" | grep -q '^00_cpu_reference,CPU,.*,2,8,8,64,64,128,0,.*,PASS,".*",0,$'; then
  result PASS "the harness's CSV ends with page_size and seqlens_k (16 and 17;0;600; a dense run 0 and nothing)"
else result FAIL "the harness's CSV columns page_size and seqlens_k" "$(cat "$LOG/kv.csv")"; fi
# the backward: dQ, dK, dV against the fp64 backward given step 00's O, on a second line
for args in "--seqlen 100 --heads 2 --batch 1 --backward" \
            "--seqlen-q 33 --seqlen-k 150 --causal --dtype bf16 --dim 64 --heads 4 --kv-heads 1 --backward" \
            "--seqlen-q 150 --seqlen-k 33 --causal --backward --check full" "--seqlen 300 --heads 2 --scale 30 --backward"; do
  # shellcheck disable=SC2086
  if out=$(build/step00/fa2 $args --iters 1 2>&1) && [ "$(echo "$out" | grep -c '| PASS')" -eq 2 ] &&
     echo "$out" | grep -q ' backward | PASS dq rel_l2'; then result PASS "step 00 $args"
  else result FAIL "step 00 $args" "$out"; fi
done

echo "== build every GPU step (binary + shared library)"
gpu_libs=()
make -s -j"$(nproc)" -k all >"$LOG/build-gpu.log" 2>&1
for dir in steps/[0-9][0-9]_*; do
  compgen -G "$dir/kernel.c*" >/dev/null || continue  # a folder left empty by a rename
  id=$(basename "$dir" | cut -c1-2); [ "$id" = 00 ] && continue
  if [ -x "build/step$id/fa2" ] && [ -f "build/step$id/libfa2.so" ] && [ "build/step$id/fa2" -nt "$dir/kernel.cu" ]; then
    result PASS "build step $(basename "$dir")"; gpu_libs+=("build/step$id/libfa2.so")
  else
    result FAIL "build step $(basename "$dir")" "see $LOG/build-gpu.log"; grep -m5 -i error "$LOG/build-gpu.log"
  fi
  # the GPU binary must refuse unsupported params with one line and exit 2, GPU or not
  expect_error 2 "step $id refuses --dim 96" "build/step$id/fa2" --dim 96
  # a step without a backward (it answers with fa2_refuse_backward) refuses --backward; one with
  # a backward refuses, in the backward's check, what its kernels cannot take
  if grep -q fa2_refuse_backward "$dir/kernel.cu"; then
    expect_error 2 "step $id refuses --backward" "build/step$id/fa2" --backward
  else
    expect_error 2 "step $id refuses --backward --dim 96" "build/step$id/fa2" --backward --dim 96
    expect_error 2 "step $id refuses FA2_DETERMINISTIC=yes" env FA2_DETERMINISTIC=yes "build/step$id/fa2" --backward
  fi
  # a step that does not take a KV cache (its kernel calls fa2_refuse_kv_cache) refuses one; a
  # step that takes one still refuses, in one line, what its kernel cannot take (its harness
  # runs with a cache are in the GPU section)
  if grep -q fa2_refuse_kv_cache "$dir/kernel.cu"; then
    expect_error 2 "step $id refuses --seqlens-k" "build/step$id/fa2" --batch 2 --seqlens-k 7,1024
    expect_error 2 "step $id refuses --page-size" "build/step$id/fa2" --page-size 64
  else
    expect_error 2 "step $id refuses --page-size 64 --seqlens-k 7,1024 --dim 96" "build/step$id/fa2" --batch 2 --seqlens-k 7,1024 --page-size 64 --dim 96
  fi
done

# The portable steps (all but the Makefile's HOPPER_STEPS) for one GPU family the default
# build has no SASS for: consumer Blackwell, sm_120, in a build dir of its own. One ARCH
# only, to keep CI's two cores within their time; ARCH=100 and 121 build the same way.
echo "== build the portable steps for ARCH=120 (SASS sm_120 + PTX compute_120), and the TMA steps"
portable_ids="$(make -s --no-print-directory portable-steps) $(make -s --no-print-directory tma-steps)"
test_nvcc=${NVCC:-${CUDA:-/usr/local/cuda}/bin/nvcc}
if "$test_nvcc" --list-gpu-arch 2>/dev/null | grep -qx compute_120; then
  arch120_targets=()
  for id in $portable_ids; do arch120_targets+=("build/arch120/step$id/fa2" "build/arch120/step$id/libfa2.so"); done
  make -s -j"$(nproc)" -k BUILD=build/arch120 ARCH=120 "${arch120_targets[@]}" >"$LOG/build-arch120.log" 2>&1
  for id in $portable_ids; do
    if [ -x "build/arch120/step$id/fa2" ] && [ -f "build/arch120/step$id/libfa2.so" ] &&
       [ "build/arch120/step$id/fa2" -nt "$(ls steps/"$id"_*/kernel.cu)" ]; then
      result PASS "build step $id for sm_120 (consumer Blackwell)"
    else
      result FAIL "build step $id for sm_120 (consumer Blackwell)" "see $LOG/build-arch120.log"
    fi
  done
else
  result SKIP "build the portable steps for sm_120" "$test_nvcc lists no compute_120: that needs CUDA 12.8 or newer"
fi
# A build made for no particular GPU still runs on a newer one: the driver JIT-compiles its PTX.
test_cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo "${CUDA:-/usr/local/cuda}/bin/cuobjdump")}
if [ -x "$test_cuobjdump" ]; then
  ptx=$("$test_cuobjdump" --list-ptx build/step07/fa2 2>&1 | sed -n 's/^PTX file *[0-9]*: *//p' | paste -sd ' ')
  if [ -n "$ptx" ]; then result PASS "step 07's default build carries PTX for newer GPUs ($ptx)"
  else result FAIL "step 07's default build carries PTX for newer GPUs" "cuobjdump --list-ptx build/step07/fa2 lists none"; fi
else
  result SKIP "step 07's default build carries PTX" "cuobjdump not found (the full CUDA Toolkit has it, pip's nvidia-cuda-cuobjdump too; or set CUOBJDUMP=...)"
fi

# the bandwidth probe's options are refused in one line before it looks for a GPU
for args in "--bytes 12" "--bytes" "--bytes -16" "--flush maybe" "--frob"; do
  # shellcheck disable=SC2086
  expect_error 2 "bandwidth_ceiling refuses '$args'" build/reference/bandwidth_ceiling $args
done
# the per-instruction counters' readings, on a recorded profile (step 14's backward, H100):
# its dQ reductions touch 8 lines and 8 sectors an instruction
if python3 tools/sass_stalls.py <(zcat tests/data/profile-src14-h100.csv.gz) --memory |
   grep -Eq '^REDG\.E\.ADD\.F32\.FTZ\.RN\.STRONG\.GPU +33554432 +268435456 +268435456 +134217728 .* 8\.00 +8\.00$'; then
  result PASS "sass_stalls.py --memory reads a recorded profile's dQ reductions (8 tag requests, 8 sectors each)"
else
  result FAIL "sass_stalls.py --memory on tests/data/profile-src14-h100.csv.gz"
fi
expect_error 2 "source_counters.sh refuses a call without OUT and BINARY" bash tools/source_counters.sh only-out
# ab.sh's medians on a recorded A/B (step 14 and its variants, H100): step 14's forward row
# (named 14_backward) stays a forward row, its backward row (14_backward_backward) is "bwd"
if bash tools/ab.sh --medians tests/data/ab-bwd-h100.csv |
   grep -Eq '^B4 H16/16 N4096 d128 fp16 c0 +1\.3818 ' &&
   bash tools/ab.sh --medians tests/data/ab-bwd-h100.csv |
   grep -Eq '^B4 H16/16 N4096 d128 fp16 c0 bwd +6\.5909 +6\.3101 '; then
  result PASS "ab.sh --medians keeps step 14's forward and backward rows apart (a recorded A/B)"
else
  result FAIL "ab.sh --medians on tests/data/ab-bwd-h100.csv"
fi
expect_error 2 "ab.sh --medians refuses a missing CSV" bash tools/ab.sh --medians /nonexistent.csv
# sanitize.sh takes a variant's shapes from the step its folder's file `step` names (make
# variant writes it): a variant of step 15 gets step 15's twelve backward runs (four tools,
# three shapes); without the file, none. A stand-in sanitizer (true) runs nothing.
mkdir -p "$LOG/variants/v15" && cp build/step00/fa2 "$LOG/variants/v15/fa2" && echo 15 >"$LOG/variants/v15/step"
n_named=$(COMPUTE_SANITIZER=true bash tools/sanitize.sh "$LOG/variants/v15/fa2" | grep -c -- '--backward')
rm "$LOG/variants/v15/step"
n_unnamed=$(COMPUTE_SANITIZER=true bash tools/sanitize.sh "$LOG/variants/v15/fa2" | grep -c -- '--backward')
[ "$n_named" = 12 ] && [ "$n_unnamed" = 0 ] && result PASS "sanitize.sh runs a variant of step 15 on step 15's backward shapes" ||
  result FAIL "sanitize.sh on a variant of step 15" "$n_named backward runs with its step file (want 12), $n_unnamed without (want 0)"
# the unfused cuBLAS baseline is checked by the same matrix
if [ -f build/reference/cublas/libfa2.so ]; then result PASS "build reference/cublas_unfused"; gpu_libs+=("build/reference/cublas/libfa2.so")
else result FAIL "build reference/cublas_unfused" "see $LOG/build-gpu.log"; fi

# Every step's ABI, CPU step included, refuses bad params in one line and touches no memory.
run_program abi build/tests/test_abi build/step00/libfa2.so "${gpu_libs[@]}"
# The same on a GPU the Hopper steps do not run on (they refuse every param there, in one line).
run_program abi-as-rtx4090 env FA2_EMULATE=rtx4090 build/tests/test_abi build/step00/libfa2.so "${gpu_libs[@]}"
# Under every FA2_EMULATE preset, each step's chosen configuration fits that GPU's shared memory.
run_program limits build/tests/test_limits "${gpu_libs[@]}"

echo "== tools/ldsm_distance.py on a SASS listing written here (HMMA 2 and 1 instructions after their nearest LDSM)"
cat >"$LOG/ldsm.sass" <<'SASS'
        Function : other_kernel
        /*0000*/                   HMMA.16816.F32 R0, R4, R8, RZ ;
        Function : the_kernel
        /*0000*/                   LDSM.16.M88.4 R4, [R1] ;
        /*0010*/                   LDSM.16.M88.2 R8, [R1+0x10] ;
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;
        /*0030*/                   HMMA.16816.F32 R12, R4, R8, RZ ;
        /*0040*/                   LDSM.16.M88.4 R4, [R1+0x20] ;
        /*0050*/                   HMMA.16816.F32 R16, R4, R9, R16 ;
SASS
out=$(python3 tools/ldsm_distance.py "$LOG/ldsm.sass" the_kernel 2 2>&1)
[[ $out == *"median 1.5 instructions after it, fewest 1, 100% within 4"* ]] && result PASS "ldsm_distance.py: $out" ||
  result FAIL "ldsm_distance.py on a known listing" "$out"
expect_error 2 "ldsm_distance.py refuses a function it cannot find" python3 tools/ldsm_distance.py "$LOG/ldsm.sass" no_such_kernel 2

echo "== the comparison tables without a GPU: table.awk and readme_table.sh on the committed CSVs and on a backward CSV written here"
# Every table on the results page or the README rewrites byte for byte from the CSV it names
# (the README's with --summary).
for page in README.md docs/results-h200.md; do
  cp "$page" "$LOG/page.md"
  page_ok=1
  summary=$([ "$page" = README.md ] && echo --summary)
  for csv in $(awk '/^<!-- written by reference\/readme_table.sh from .*: edit that, not this -->$/ {
                      csv = $6; sub(/:$/, "", csv); print csv }' "$page"); do
    bash reference/readme_table.sh $summary "$csv" "$LOG/page.md" >"$LOG/page.log" 2>&1 || page_ok=0
  done
  if [ $page_ok = 1 ] && cmp -s "$page" "$LOG/page.md"; then result PASS "readme_table.sh rewrites $page from the CSVs it names, byte for byte"
  else result FAIL "readme_table.sh rewrites $page from the CSVs it names" "$(diff "$page" "$LOG/page.md" | head -n 5; tail -n 1 "$LOG/page.log")"; fi
done
# A backward run's rows, as compare.sh SHAPES=backward writes them: step 14's forward row
# (named 14_backward) and its backward row (14_backward_backward) in two rounds, the second
# unchecked and slower, and torch's backward per backend, efficient's refused.
bwd_dir=$LOG/backward-csv
mkdir -p "$bwd_dir"
cat >"$bwd_dir/compare-gpu-x-2026-11-25.csv" <<'CSV'
step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal,ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status,key_change
14_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.05000,0.04900,0.05100,171.80,2.000e-04,1.000e-03,1.000e-06,PASS,"the backward: dQ, dK, dV"
14_backward_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.20000,0.19000,0.21000,107.37,1.000e-03,2.000e-03,nan,PASS,"the backward: dQ, dK, dV"
torch_sdpa_flash_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.25000,0.24000,0.26000,85.90,1.000e-03,2.000e-03,nan,PASS,"PyTorch SDPA, FLASH_ATTENTION backend (FlashAttention-2), backward"
torch_sdpa_cudnn_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.10000,0.09000,0.11000,214.75,1.000e-03,2.000e-03,nan,PASS,"PyTorch SDPA, CUDNN_ATTENTION backend (cuDNN fused attention), backward"
torch_sdpa_efficient_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,nan,nan,nan,nan,nan,nan,nan,UNSUPPORTED,"PyTorch SDPA, EFFICIENT_ATTENTION backend (memory-efficient attention), backward"
torch_sdpa_default_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.10000,0.09000,0.11000,214.75,1.000e-03,2.000e-03,nan,PASS,"PyTorch SDPA, no backend restriction (what a user gets), backward"
14_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.06000,0.05900,0.06100,143.17,nan,nan,nan,UNCHECKED,"the backward: dQ, dK, dV"
14_backward_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.30000,0.29000,0.31000,71.58,nan,nan,nan,UNCHECKED,"the backward: dQ, dK, dV"
CSV
printf 'probe,device,date,dtype,tflops\nmma_sync_m16n8k16,GPU X,2026-11-25,fp16,600.0\nwgmma_m64n256k16,GPU X,2026-11-25,fp16,900.0\n' \
  >"$bwd_dir/ceiling-gpu-x-2026-11-25.csv"
n_bwd=$(awk -v mode=count_backward -f reference/table.awk "$bwd_dir/compare-gpu-x-2026-11-25.csv")
n_fwd=$(awk -v mode=count_backward -f reference/table.awk results/compare/compare-bench-nvidia-h200-2026-11-28.csv)
[ "$n_bwd" = 6 ] && [ "$n_fwd" = 0 ] && result PASS "table.awk counts 6 backward rows in the backward CSV and 0 in a bench CSV" ||
  result FAIL "table.awk's backward rows" "counted $n_bwd (want 6) and $n_fwd in a bench CSV (want 0)"
# the backward's table: step 14 under its name, the median of its two rounds (0.25 ms),
# TFLOP/s = 2.5 x 4 x 2 x 8 x 1024^2 x 128 / 0.25 ms = 85.9, 0.40x cuDNN, 14.3% of mma.sync's
# 600 and no share of wgmma's (it runs mma.sync); torch's rows both (215 of 600 and of 900)
out=$(awk -v mode=markdown -v backward=1 -v ceiling_csv="$bwd_dir/ceiling-gpu-x-2026-11-25.csv" -v wgmma_steps="09 15" \
      -f reference/table.awk "$bwd_dir/compare-gpu-x-2026-11-25.csv")
want_rows=("| step | time (ms) | TFLOP/s | vs torch-FA2 | vs cuDNN | vs default SDPA | % of mma.sync ceiling | % of wgmma ceiling | key change |"
           "| 14_backward | 0.2500 | 85.9 | 1.00x | 0.40x | 0.40x | 14.3% | - | the backward: dQ, dK, dV |"
           "| torch_sdpa_cudnn | 0.1000 | 215 | 2.50x | 1.00x | 1.00x | 35.8% | 23.9% | PyTorch SDPA, CUDNN_ATTENTION backend (cuDNN fused attention), backward |"
           "| torch_sdpa_efficient [UNSUPPORTED] | - | - | - | - | - | - | - | PyTorch SDPA, EFFICIENT_ATTENTION backend (memory-efficient attention), backward |")
bwd_ok=1
for row in "${want_rows[@]}"; do grep -qxF "$row" <<<"$out" || bwd_ok=0; done
[ "$(grep -c '^| ' <<<"$out")" = 6 ] || bwd_ok=0  # the header, step 14 and four torch backends
[ $bwd_ok = 1 ] && result PASS "table.awk backward=1: the backward's table (2.5 forwards, vs torch-FA2, cuDNN and default, % of each ceiling)" ||
  result FAIL "table.awk backward=1" "$out"
# FlashAttention-4's rows (sdpa.py --backends fa4): the same CSV with fa4_backward at 0.125 ms
# and an fa4 forward row: the backward's table gains "vs FA4" (step 14 at 0.25 ms: 0.50x),
# FA4's own backward row 1.00x; the forward's table has its row, and no column for it without one.
cp "$bwd_dir/compare-gpu-x-2026-11-25.csv" "$bwd_dir/fa4.csv"
cat >>"$bwd_dir/fa4.csv" <<'CSV'
fa4_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.12500,0.12000,0.13000,171.80,1.000e-03,2.000e-03,nan,PASS,"FlashAttention-4 (pip flash-attn-4: flash_attn.cute.flash_attn_func), backward"
fa4,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.02500,0.02400,0.02600,343.60,2.000e-04,1.000e-04,nan,PASS,"FlashAttention-4 (pip flash-attn-4: flash_attn.cute.flash_attn_func)"
CSV
out=$(awk -v mode=markdown -v backward=1 -v wgmma_steps="09 15" -f reference/table.awk "$bwd_dir/fa4.csv")
fwd_out=$(awk -v mode=markdown -v wgmma_steps="09 15" -f reference/table.awk "$bwd_dir/fa4.csv")
if grep -qxF "| step | time (ms) | TFLOP/s | vs torch-FA2 | vs cuDNN | vs default SDPA | vs FA4 | % of mma.sync ceiling | % of wgmma ceiling | key change |" <<<"$out" &&
   grep -qxF "| 14_backward | 0.2500 | 85.9 | 1.00x | 0.40x | 0.40x | 0.50x | - | - | the backward: dQ, dK, dV |" <<<"$out" &&
   grep -qF "| fa4 | 0.1250 | 172 | 2.00x | 0.80x | 0.80x | 1.00x |" <<<"$out" &&
   grep -qF "| fa4 | 0.0250 | 344 | - | - | 1.00x |" <<<"$fwd_out" && ! grep -q "vs FA4" <<<"$(awk -v mode=markdown -f reference/table.awk results/compare/compare-bench-nvidia-h200-2026-11-28.csv)"; then
  result PASS "table.awk: FA4's rows add a column \"vs FA4\" to the forward and backward tables, and none where a CSV has none"
else result FAIL "table.awk with FA4's rows" "$out"; fi
# Without backward=1 the backward rows stay out, and so do the forward rows of the steps named
# *_backward (their forward is another step's, with a row of its own). The CSV above with
# step 07's forward row and step 15's forward and backward rows added: the forward table (text,
# as compare.sh prints it, and markdown) and the decode table show step 07's row alone, the
# backward table steps 14 and 15 and no step 07.
fwd_csv=$bwd_dir/with-forward.csv
{
  cat "$bwd_dir/compare-gpu-x-2026-11-25.csv"
  echo '07_tuned,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.05000,0.04900,0.05100,171.80,2.000e-04,1.000e-03,1.000e-06,PASS,"tuned tiles"'
  echo '15_wgmma_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.04000,0.03900,0.04100,214.75,2.000e-04,1.000e-03,1.000e-06,PASS,"the backward on wgmma"'
  echo '15_wgmma_backward_backward,GPU X,2026-11-25,fp16,2,8,8,1024,1024,128,0,0.12000,0.11000,0.13000,178.96,1.000e-03,2.000e-03,nan,PASS,"the backward on wgmma"'
} >"$fwd_csv"
fwd_ok=1
for mode_decode in "text|" "markdown|" "markdown|2 8 8 1024 1024 128 0 fp16"; do
  out=$(awk -v mode="${mode_decode%%|*}" -v decode="${mode_decode#*|}" -f reference/table.awk "$fwd_csv")
  [ "$(grep -c '^| 07_tuned | 0.0500 |\|^07_tuned  *0.0500 ' <<<"$out")" = 1 ] && ! grep -q '_backward' <<<"$out" ||
    { fwd_ok=0; echo "  mode|decode $mode_decode: want step 07's row alone:"; echo "$out"; }
done
# step 15 runs wgmma: 2.5 x 4 x 2 x 8 x 1024^2 x 128 / 0.12 ms = 179 TFLOP/s, 19.9% of wgmma's 900
# and no share of mma.sync's
out=$(awk -v mode=markdown -v backward=1 -v ceiling_csv="$bwd_dir/ceiling-gpu-x-2026-11-25.csv" -v wgmma_steps="09 15" \
      -f reference/table.awk "$fwd_csv")
grep -q '^| 14_backward | 0.2500 |' <<<"$out" && grep -q '^| 15_wgmma_backward | 0.1200 | 179 | 2.08x | 0.83x | 0.83x | - | 19.9% |' <<<"$out" &&
  ! grep -q '07_tuned' <<<"$out" ||
  { fwd_ok=0; echo "  backward=1: want the backward rows of steps 14 and 15 (15's share of wgmma's ceiling), no step 07:"; echo "$out"; }
# the committed CSVs: the bench run's forward rows of step 14 and the backward run's rows of both
out=$(awk -v mode=markdown -f reference/table.awk results/compare/compare-bench-nvidia-h200-2026-11-28.csv)
grep -q '^| 07_tuned |' <<<"$out" && ! grep -q '^| 14_backward' <<<"$out" || { fwd_ok=0; echo "  the committed bench CSV shows step 14's forward rows"; }
out=$(awk -v mode=markdown -v backward=1 -f reference/table.awk results/compare/compare-backward-nvidia-h200-2026-11-28.csv)
[ "$(grep -c '^| 14_backward' <<<"$out")" = 6 ] && [ "$(grep -c '^| 15_wgmma_backward' <<<"$out")" = 6 ] ||
  { fwd_ok=0; echo "  the committed backward CSV: want 6 backward rows of step 14 and 6 of step 15"; }
[ $fwd_ok = 1 ] && result PASS "table.awk: the steps named *_backward only in the backward tables (forward and decode tables: no row of theirs)" ||
  result FAIL "table.awk leaves the backward rows and the *_backward steps' forward rows out of the forward tables"
cp docs/results-h200.md "$LOG/page.md"
# the page outside its backward-table lines (the begin line kept as a mark), and inside them
outside_backward() { awk '/<!-- backward-table:begin -->/ { print; inside = 1 } /<!-- backward-table:end -->/ { inside = 0 } !inside' "$1"; }
inside_backward() { awk '/<!-- backward-table:end -->/ { inside = 0 } inside; /<!-- backward-table:begin -->/ { inside = 1 }' "$1"; }
if bash reference/readme_table.sh "$bwd_dir/compare-gpu-x-2026-11-25.csv" "$LOG/page.md" >"$LOG/page.log" 2>&1 &&
   [ "$(outside_backward docs/results-h200.md)" = "$(outside_backward "$LOG/page.md")" ] &&
   inside_backward "$LOG/page.md" | grep -q '^Measured on \*\*GPU X\*\*, 2026-11-25, with `make compare SHAPES=backward` in 2 rounds' &&
   inside_backward "$LOG/page.md" | grep -qxF "${want_rows[1]}"; then
  result PASS "readme_table.sh writes a backward CSV between the backward-table lines of docs/results-h200.md, nothing else"
else result FAIL "readme_table.sh with a backward CSV" "$(tail -n 2 "$LOG/page.log")"; fi
# The README's one table from the committed summary run: a row per step, each at its headline
# shape (the forward steps' TFLOP/s, step 13's GB/s of K and V, the backward steps' backward)
printf '# x\n<!-- summary-table:begin -->\n<!-- summary-table:end -->\n' >"$LOG/front.md"
summary_csv=$(ls results/compare/compare-summary-*.csv | tail -n 1)
if bash reference/readme_table.sh --summary "$summary_csv" "$LOG/front.md" >"$LOG/front.log" 2>&1 &&
   [ "$(grep -c '^| \[[0-9][0-9]\](docs/[0-9][0-9]_[a-z_]*\.md)' "$LOG/front.md")" = "$(ls -d steps/[0-9][0-9]_* | wc -l)" ] &&
   grep -q '^| \[13\](docs/13_split_kv.md) | .* GB/s | [0-9]*% of bandwidth |' "$LOG/front.md" &&
   grep -q '^| \[15\](docs/15_wgmma_backward.md)[^|]* | .* TFLOP/s | [0-9]*% of wgmma |' "$LOG/front.md" &&
   grep -q '^| \[07\](docs/07_tuned.md) | .* TFLOP/s | [0-9]*% of mma.sync |' "$LOG/front.md"; then
  result PASS "readme_table.sh --summary: one row per step, each at its headline shape, from one CSV"
else result FAIL "readme_table.sh --summary on $summary_csv" "$(tail -n 2 "$LOG/front.log"; grep '^| \[' "$LOG/front.md" | head -n 3)"; fi
expect_error 2 "readme_table.sh --summary refuses a page without the summary-table lines" bash reference/readme_table.sh --summary "$summary_csv" "$LOG/page.md"
expect_error 2 "compare.sh refuses an unknown SHAPES" env SHAPES=frobnicate bash reference/compare.sh
grep -q 'allowed: seed, bench, sweep, decode, backward, summary, all' "$LOG/cli.err" && result PASS "... and names backward and summary among the sets it allows" ||
  result FAIL "compare.sh's allowed sets" "$(cat "$LOG/cli.err")"
# compare.sh runs the steps named *_backward in SHAPES=backward alone. In a tree of compare.sh,
# shapes.txt and the steps' kernel files with nothing built, under an nvidia-smi that names a
# GPU, compare.sh stops at the binaries it lacks: the steps it would run.
cmp_dir=$LOG/compare-tree
rm -rf "$cmp_dir"; mkdir -p "$cmp_dir/reference" "$cmp_dir/bin"
cp reference/compare.sh reference/shapes.sh reference/shapes.txt "$cmp_dir/reference/"
for k in steps/[0-9][0-9]_*/kernel.c*; do mkdir -p "$cmp_dir/${k%/*}"; cp "$k" "$cmp_dir/$k"; done
printf '#!/bin/sh\necho "GPU X"\n' >"$cmp_dir/bin/nvidia-smi"; chmod +x "$cmp_dir/bin/nvidia-smi"
for set in bench decode backward; do
  expect_error 2 "compare.sh SHAPES=$set with nothing built" env PATH="$PWD/$cmp_dir/bin:$PATH" bash "$cmp_dir/reference/compare.sh" $set
  bins=$(grep -o 'build/step[0-9][0-9]/fa2' "$LOG/cli.err" | tr '\n' ' ')
  case $set in  # the forward sets: step 07 and not 14 or 15; backward: 14 and 15
    backward) [[ $bins == *step14/fa2*step15/fa2* ]] ;;
    *) [[ $bins == *step07/fa2* && $bins != *step1[45]/fa2* ]] ;;
  esac && result PASS "... which, SHAPES=$set, would run $bins" ||
    result FAIL "compare.sh SHAPES=$set: steps 14 and 15 in SHAPES=backward alone" "it would run $bins"
done
# STEPS: the steps named alone (the cuBLAS baseline and the ceilings stay), and one line for a
# name that is no step or a step the set does not run.
expect_error 2 "compare.sh STEPS='11 12' with nothing built" env PATH="$PWD/$cmp_dir/bin:$PATH" STEPS="11 12" bash "$cmp_dir/reference/compare.sh" bench
bins=$(grep -o 'build/step[0-9][0-9]/fa2' "$LOG/cli.err" | tr '\n' ' ')
[ "$bins" = "build/step11/fa2 build/step12/fa2 " ] && result PASS "... which would run steps 11 and 12 alone" ||
  result FAIL "compare.sh STEPS='11 12'" "it would run $bins"
expect_error 2 "compare.sh refuses STEPS naming no step" env STEPS="11 99" bash reference/compare.sh bench
expect_error 2 "compare.sh refuses BACKENDS naming no backend" env BACKENDS="flash,xla" bash reference/compare.sh bench
expect_error 2 "compare.sh refuses STEPS naming a step SHAPES=bench does not run" env PATH="$PWD/$cmp_dir/bin:$PATH" STEPS=14 bash "$cmp_dir/reference/compare.sh" bench
n=$(bash -c '. reference/shapes.sh; shapes_of backward' | wc -l)
[ "$n" = 6 ] && result PASS "reference/shapes.txt has the six backward shapes" || result FAIL "the backward set of shapes.txt" "$n shapes, want 6"
# A decode run's rows with a KV cache, as compare.sh SHAPES=decode writes them (page_size and
# seqlens_k after the key change): B1 H32/8 Nk32768 contiguous, in pages of 16 and of 256, two
# rounds each, and the batch of 32 mixed lengths (shapes.txt's lens=128..32768: 199,409 keys)
# contiguous and in pages of 16, with torch at the contiguous shape only.
dec_dir=$LOG/decode-csv
mkdir -p "$dec_dir"
lens=$(bash -c '. reference/shapes.sh; shape_flags "32 32 8 1 32768 128 0 bf16 lens=128..32768"' | sed -e 's/^--seqlens-k //' -e 's/,/;/g')
kc='"split-KV decode: a GQA group'"'"'s heads packed as rows, keys split over blocks and warps, merged by LSE"'
{
  echo "step,device,date,dtype,batch,heads_q,heads_kv,seqlen_q,seqlen_k,head_dim,causal,ms_median,ms_min,ms_max,tflops,rel_l2,max_abs,lse_err,status,key_change,page_size,seqlens_k"
  for round in 1 2; do
    st=$([ $round = 1 ] && echo PASS || echo UNCHECKED)
    echo "13_split_kv,GPU X,2026-11-25,bf16,1,32,8,1,32768,128,0,0.07000,0.06900,0.07100,0.12,1.000e-03,1.000e-03,1.000e-06,$st,$kc,0,"
    echo "torch_sdpa_flash,GPU X,2026-11-25,bf16,1,32,8,1,32768,128,0,0.08000,0.07900,0.08100,0.10,1.000e-03,1.000e-03,1.000e-06,$st,\"PyTorch SDPA, FLASH_ATTENTION backend (FlashAttention-2)\",0,"
    echo "13_split_kv,GPU X,2026-11-25,bf16,1,32,8,1,32768,128,0,0.0714$round,0.07000,0.07200,0.12,1.000e-03,1.000e-03,1.000e-06,$st,$kc,16,"
    echo "13_split_kv,GPU X,2026-11-25,bf16,1,32,8,1,32768,128,0,0.0800$round,0.07900,0.08100,0.10,1.000e-03,1.000e-03,1.000e-06,$st,$kc,256,"
  done
  echo "13_split_kv,GPU X,2026-11-25,bf16,32,32,8,1,32768,128,0,0.40000,0.39000,0.41000,0.50,1.000e-03,1.000e-03,1.000e-06,PASS,$kc,0,$lens"
  echo "13_split_kv,GPU X,2026-11-25,bf16,32,32,8,1,32768,128,0,0.41000,0.40000,0.42000,0.50,1.000e-03,1.000e-03,1.000e-06,PASS,$kc,16,$lens"
} >"$dec_dir/compare-gpu-x-2026-11-25.csv"
printf 'probe,device,date,gbps\nstream_read,GPU X,2026-11-25,3000\n' >"$dec_dir/bandwidth-gpu-x-2026-11-25.csv"
# GB/s = 2 x keys x 8 x 128 x 2 / time: 1917 contiguous (0.07 ms, 2^15 keys) = 63.9% of 3000 and
# 1.14x torch-FA2 (0.08 ms); pages of 16, 0.07141/0.07142 ms: 1879, 62.6%, 1.12x the contiguous
# cache's torch; the mixed batch, 199,409 keys: 2042 GB/s (0.40 ms, 68.1%), paged 1992 (66.4%), no torch
dec_ok=1
cp docs/results-h200.md "$LOG/page.md"
if bash reference/readme_table.sh "$dec_dir/compare-gpu-x-2026-11-25.csv" "$LOG/page.md" >"$LOG/page.log" 2>&1; then
  out=$(awk '/<!-- decode-table:end -->/ { inside = 0 } inside; /<!-- decode-table:begin -->/ { inside = 1 }' "$LOG/page.md")
  want_lines=("**bf16, B=1, H=32 (KV 8), Nq=1, Nk=32768, d=128, non-causal**"
              "**bf16, B=1, H=32 (KV 8), Nq=1, Nk=32768, d=128, non-causal (K, V in pages of 16)**"
              "**bf16, B=1, H=32 (KV 8), Nq=1, Nk=32768, d=128, non-causal (K, V in pages of 256)**"
              "**bf16, B=32, H=32 (KV 8), Nq=1, Nk=32768, d=128, non-causal (Nk per sequence: 128..32768)**"
              "**bf16, B=32, H=32 (KV 8), Nq=1, Nk=32768, d=128, non-causal (Nk per sequence: 128..32768) (K, V in pages of 16)**"
              "| 13_split_kv | 0.0700 | 1917 | 63.9% | 1.14x | - | - | ${kc//\"/} |"
              "| 13_split_kv | 0.0714 | 1879 | 62.6% | 1.12x | - | - | ${kc//\"/} |"
              "| 13_split_kv | 0.4000 | 2042 | 68.1% | - | - | - | ${kc//\"/} |"
              "| 13_split_kv | 0.4100 | 1992 | 66.4% | - | - | - | ${kc//\"/} |"
              "Torch ratios against torch SDPA on the contiguous cache of the same shape (the same bytes; torch SDPA has no paged input)."
              "No torch ratios: torch SDPA takes no per-sequence key count for a dense batch (short of padding every sequence to the longest).")
  for line in "${want_lines[@]}"; do grep -qxF "$line" <<<"$out" || { dec_ok=0; echo "  missing: $line"; }; done
  [ "$(grep -c '^\*\*bf16' <<<"$out")" = 5 ] || { dec_ok=0; echo "  want 5 tables, got $(grep -c '^\*\*bf16' <<<"$out")"; }
  [ "$(grep -c '^| 13_split_kv ' <<<"$out")" = 5 ] || { dec_ok=0; echo "  want 5 rows of step 13"; }
  grep -q 'with `make compare SHAPES=decode` in 2 rounds' <<<"$out" || { dec_ok=0; echo "  want 2 rounds"; }
else dec_ok=0; fi
[ $dec_ok = 1 ] && result PASS "readme_table.sh with a decode CSV of paged and mixed-length rows: a table each, GB/s of the keys held, torch from the contiguous cache" ||
  result FAIL "readme_table.sh with paged and mixed-length decode rows" "$(tail -n 2 "$LOG/page.log"; grep '^\*\*\|^| 13' "$LOG/page.md" | head -n 20)"
# shapes.sh: the options of shapes.txt, their flags, and a malformed option refused in one line
printf 'decode 4 8 2 1 1000 64 0 bf16 lens=10..1000 page=32\ndecode 4 8 2 1 1000 64 0 bf16\n' >"$LOG/shapes-good.txt"
out=$(SHAPES_TXT=$LOG/shapes-good.txt bash -c '. reference/shapes.sh; shapes_of decode | while read -r s; do shape_flags "$s"; echo "[$s]"; done' 2>&1)
want=$'--seqlens-k 10,46,215,1000 --page-size 32\n[4 8 2 1 1000 64 0 bf16 lens=10..1000 page=32]\n\n[4 8 2 1 1000 64 0 bf16]'
[ "$out" = "$want" ] && result PASS "shapes.sh: page=N and lens=A..B as --page-size and --seqlens-k (geometric, A to B)" ||
  result FAIL "shapes.sh's options" "$out"
for bad in "page=48" "page=8" "page=512" "lens=0..100" "lens=200..100" "lens=10..2000" "lens=10-100" "pages=16" "page=16 page=32"; do
  printf 'decode 4 8 2 1 1000 64 0 bf16 %s\n' "$bad" >"$LOG/shapes-bad.txt"
  expect_error 2 "shapes.sh refuses '$bad'" env SHAPES_TXT="$LOG/shapes-bad.txt" bash -c '. reference/shapes.sh; shapes_of decode'
done
printf 'decode 1 8 2 1 1000 64 0 bf16 lens=10..100\n' >"$LOG/shapes-bad.txt"
expect_error 2 "shapes.sh refuses lens= at batch 1" env SHAPES_TXT="$LOG/shapes-bad.txt" bash -c '. reference/shapes.sh; shapes_of decode'
printf 'decode 4 8 2 1 1000 64 0\n' >"$LOG/shapes-bad.txt"
expect_error 2 "shapes.sh refuses a shape of seven fields" env SHAPES_TXT="$LOG/shapes-bad.txt" bash -c '. reference/shapes.sh; shapes_of decode'
n=$(bash -c '. reference/shapes.sh; shapes_of decode' | grep -c 'page=\|lens=')
[ "$n" = 14 ] && result PASS "reference/shapes.txt's decode set has 14 KV-cache shapes (6 x pages of 16 and 256, the mixed batch twice)" ||
  result FAIL "the KV-cache shapes of shapes.txt's decode set" "$n, want 14"

echo "== Python: the torch operators (python/fa2.py, fa2_ext.cpp) with step 00, sdpa.py's fp64 backward, and the plots"
if python3 -c 'import torch' >/dev/null 2>&1; then
  run_program torch-cpu python3 tests/test_torch.py 00
  run_program kvcache-cpu python3 tests/test_kvcache.py 00  # attention_with_kvcache: pages, lengths, bad input
  # the operators themselves: opcheck, fake kernels, a model compiled with fullgraph=True
  run_program torch-ops-cpu python3 tests/test_torch_ops.py --cpu
  # ring attention's arithmetic (context parallelism) on one device: K/V in chunks, merged by LSE
  run_program ring-cpu python3 tests/test_ring.py --cpu
  run_program sdpa-backward python3 tests/test_sdpa_backward.py
  # a small transformer trained through the binding with step 00's forward and backward,
  # against the same model on torch SDPA (python/train.py: 300 steps, two seeds, about a minute)
  run_program train-cpu python3 python/train.py --step 00 --device cpu
else result SKIP "the torch operators on the CPU (step 00, a KV cache, opcheck, a fullgraph compile, the ring's LSE merge), sdpa.py's fp64 backward, the training run" "torch is not installed (pip install torch)"; fi
if python3 -c 'import matplotlib, numpy' >/dev/null 2>&1; then
  # on the newest committed compare CSV, as make plots with no CSV
  if python3 plots/progression.py --out "$LOG/progression.png" >"$LOG/plot.log" 2>&1 && [ -s "$LOG/progression.png" ]; then
    result PASS "plots/progression.py draws the newest committed compare CSV"
  else result FAIL "plots/progression.py" "$(tail -n 2 "$LOG/plot.log")"; fi
  # a tree without git's history (a release's archive, a copy) draws the same plot, its newest
  # CSV found by the dates in the files' names instead
  if GIT_DIR=/nonexistent python3 plots/progression.py --out "$LOG/progression-nogit.png" >"$LOG/plot-nogit.log" 2>&1 &&
     cmp -s "$LOG/progression.png" "$LOG/progression-nogit.png"; then
    result PASS "plots/progression.py without git's history draws the same plot"
  else result FAIL "plots/progression.py without git's history" "$(tail -n 2 "$LOG/plot-nogit.log")"; fi
else result SKIP "plots" "matplotlib is not installed (make plots makes a local .venv for it)"; fi

echo "== GPU matrix"
# Steps built for one GPU family only (the Makefile's HOPPER_STEPS): they need compute
# capability 9.0, and elsewhere refuse every shape, in one line, with exit code 2.
declare -A needs_cc=()
for id in $(make -s --no-print-directory hopper-steps); do needs_cc[$id]=9.0; done
# The TMA steps (the Makefile's TMA_STEPS) need compute capability 9.0 or newer.
declare -A tma_step=()
for id in $(make -s --no-print-directory tma-steps); do tma_step[$id]=1; done
if [ ${#gpu_libs[@]} -gt 0 ] && nvidia-smi -L >/dev/null 2>&1; then
  gpu_cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' ')
  matrix_libs=()
  for lib in "${gpu_libs[@]}"; do
    id=$(basename "$(dirname "$lib")" | cut -c5-6)
    if [[ $lib == build/step* ]] && [ -n "${needs_cc[$id]:-}" ] && [ "${needs_cc[$id]}" != "$gpu_cc" ]; then
      result SKIP "step $id GPU matrix, harness runs and sanitizer" "built for compute capability ${needs_cc[$id]} only, this GPU is $gpu_cc"
      expect_error 2 "step $id refuses this GPU" "build/step$id/fa2"
    elif [[ $lib == build/step* ]] && [ -n "${tma_step[$id]:-}" ] && [ "${gpu_cc%%.*}" -lt 9 ]; then
      result SKIP "step $id GPU matrix, harness runs and sanitizer" "TMA needs compute capability 9.0 or newer, this GPU is $gpu_cc"
      expect_error 2 "step $id refuses this GPU" "build/step$id/fa2"
    else
      matrix_libs+=("$lib")
    fi
  done
  # compute-sanitizer on every step while the matrix runs (tools/sanitize.sh, one log per step)
  sanitize_pids=()
  if command -v compute-sanitizer >/dev/null || [ -n "${COMPUTE_SANITIZER:-}" ]; then
    for lib in "${matrix_libs[@]}"; do
      [[ $lib == build/step* ]] || continue
      bash tools/sanitize.sh "$(dirname "$lib")/fa2" >"$LOG/sanitize-$(basename "$(dirname "$lib")").log" 2>&1 &
      sanitize_pids+=($!)
    done
    # and every portable step under every FA2_EMULATE preset (the list the harness's --help
    # prints), on the shapes that reach each configuration a step can choose there; the TMA
    # steps under the presets of compute capability 9.0 or newer (the others they refuse)
    portable=$(make -s --no-print-directory portable-steps)
    tma=$(make -s --no-print-directory tma-steps)
    for preset in $(build/step00/fa2 --help | sed -n 's/^FA2_EMULATE presets: //p' | tr -d ','); do
      # a preset whose blocks get more shared memory than this GPU's cannot run here
      if ! refusal=$(FA2_EMULATE=$preset build/step07/fa2 --plan 2>&1 >/dev/null); then
        result SKIP "compute-sanitizer as $preset" "$refusal"; continue
      fi
      ( for id in $portable; do FA2_EMULATE=$preset bash tools/sanitize.sh "build/step$id/fa2" preset; done
        for id in $tma; do
          FA2_EMULATE=$preset "build/step$id/fa2" --plan >/dev/null 2>&1 || { echo "# step $id refuses $preset"; continue; }
          FA2_EMULATE=$preset bash tools/sanitize.sh "build/step$id/fa2" preset
        done
      ) >"$LOG/sanitize-preset-$preset.log" 2>&1 &
      sanitize_pids+=($!)
    done
  else
    result SKIP "compute-sanitizer" "not found: it ships with the CUDA Toolkit (or set COMPUTE_SANITIZER=...)"
  fi
  run_program gpu-matrix build/tests/gpu_matrix "${matrix_libs[@]}"
  for lib in "${matrix_libs[@]}"; do
    [[ $lib == build/step* ]] || continue
    id=$(basename "$(dirname "$lib")" | cut -c5-6)
    for args in "" "--seqlen 1025 --causal --dtype bf16 --dim 64 --kv-heads 2" "--scale 30" "--scale 100" \
                "--scale 30 --dtype bf16" "--scale 100 --dtype bf16"; do
      # shellcheck disable=SC2086
      expect_pass "step $id harness run $args" "build/step$id/fa2" $args --iters 3 --warmup 1
    done
    # a step that takes a KV cache (its kernel does not call fa2_refuse_kv_cache): decode
    # against lengths per sequence (0, 1, page and tile boundaries, the longest) in shuffled
    # pages of 16, 64 and 256 keys, and on dense K and V; GQA, MQA, causal Nq 2 to 4
    if ! grep -q fa2_refuse_kv_cache "$(ls steps/"$id"_*/kernel.cu)"; then
      for args in "--batch 4 --seqlen-q 1 --seqlen-k 4096 --seqlens-k 0,1,64,4096 --page-size 64 --heads 32 --kv-heads 8" \
                  "--batch 3 --seqlen-q 4 --seqlen-k 3001 --seqlens-k 3001,17,2048 --page-size 16 --causal --heads 16 --kv-heads 2 --dim 64 --dtype bf16" \
                  "--batch 2 --seqlen-q 2 --seqlen-k 5000 --seqlens-k 257,5000 --page-size 256 --causal --heads 8 --kv-heads 1" \
                  "--batch 3 --seqlen-q 3 --seqlen-k 2500 --seqlens-k 2500,0,129 --causal --heads 16 --kv-heads 4 --dtype bf16"; do
        # shellcheck disable=SC2086
        expect_pass "step $id harness run $args" "build/step$id/fa2" $args --iters 3 --warmup 1
      done
    fi
    # a step with a backward: dQ, dK and dV checked too, on a second PASS line; with the
    # dQ atomics and with FA2_DETERMINISTIC=1's dQ splits (at most 16, summed in order)
    grep -q fa2_refuse_backward steps/"$id"_*/kernel.cu && continue
    for det in 0 1; do
      # (at most 2^30 multiply-adds in the fp64 backward, so that the harness checks the
      # gradients at its default --check: the default B2 H8 N1024 d128 would be UNCHECKED)
      for args in "--seqlen 512 --backward" "--seqlen-q 33 --seqlen-k 150 --causal --dtype bf16 --dim 64 --heads 4 --kv-heads 1 --backward" \
                  "--seqlen-q 1000 --seqlen-k 77 --causal --heads 8 --kv-heads 2 --backward" "--seqlen 512 --scale 30 --backward"; do
        # shellcheck disable=SC2086
        if out=$(FA2_DETERMINISTIC=$det "build/step$id/fa2" $args --iters 3 --warmup 1 2>&1) &&
           [ "$(echo "$out" | grep -c '| PASS')" -eq 2 ]; then result PASS "step $id harness run $args FA2_DETERMINISTIC=$det"
        else result FAIL "step $id harness run $args FA2_DETERMINISTIC=$det" "$out"; fi
      done
    done
  done
  echo "  (the steps' harness runs done $((SECONDS - run_t0)) s into the run)"
  if python3 -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' >/dev/null 2>&1; then
    ids=()
    for lib in "${matrix_libs[@]}"; do [[ $lib == build/step* ]] && ids+=("$(basename "$(dirname "$lib")" | cut -c5-6)"); done
    run_program torch-gpu python3 tests/test_torch.py "${ids[@]}"
    # attention_with_kvcache: checked where a step takes a KV cache, else refused with the step's reason
    run_program kvcache-gpu python3 tests/test_kvcache.py "${ids[@]}"
    # the operators on the GPU: opcheck, a fullgraph compile, a CUDA graph of decode (pages,
    # lengths), and SDPA's flash path through the steps inside a transformers Llama
    run_program torch-ops-gpu python3 tests/test_torch_ops.py --gpu
    # ring attention's arithmetic on one GPU: steps 07/14 and the SDPA provider's pair over
    # K/V chunks merged by LSE, forward and backward, against fp64 and one call
    run_program ring-gpu python3 tests/test_ring.py --gpu
    # the training run with the backward step's forward and backward, on the GPU
    for id in "${ids[@]}"; do
      grep -q fa2_refuse_backward steps/"$id"_*/kernel.cu && continue
      run_program "train-step$id" python3 python/train.py --step "$id" --device cuda --csv "$LOG/train-step$id.csv"
    done
  else
    result SKIP "the torch binding on the GPU steps" "torch with CUDA is not installed"
  fi
  # A CUDA call that fails says why: step 02 built for a GPU family newer than this one (its
  # SASS and its PTX both need a newer GPU; an older family's PTX would JIT-compile and run).
  newer_arch=$(for a in 80 86 89 90 100 120 121; do [ "$a" -gt "${gpu_cc/./}" ] && echo "$a" && break; done)
  if [ -z "$newer_arch" ]; then
    result SKIP "a step built for a newer GPU family fails with the runtime's reason" "no target newer than this GPU's $gpu_cc"
  elif make -s BUILD=build/wrong-arch ARCH="$newer_arch" build/wrong-arch/step02/fa2 >"$LOG/build-wrong-arch.log" 2>&1; then
    expect_error 4 "step 02 built for sm_$newer_arch only, on this GPU" build/wrong-arch/step02/fa2 --iters 1
    grep -qE "no kernel image|invalid device function" "$LOG/cli.err" && result PASS "... and the line gives the runtime's reason" ||
      result FAIL "the failed launch's line gives no reason" "$(cat "$LOG/cli.err")"
  else
    result FAIL "build step 02 for sm_$newer_arch" "see $LOG/build-wrong-arch.log"
  fi
  if [ ${#sanitize_pids[@]} -gt 0 ]; then
    echo "== compute-sanitizer (memcheck, racecheck, synccheck, initcheck) on every step"
    wait "${sanitize_pids[@]}"
    echo "  (the sanitizers done $((SECONDS - run_t0)) s into the run)"
    for log in "$LOG"/sanitize-*.log; do count_lines "$log"; done
  fi
else
  result SKIP "GPU matrix, harness runs and compute-sanitizer of ${#gpu_libs[@]} GPU steps: no GPU on this machine (nvidia-smi found none)"
  for lib in "${gpu_libs[@]}"; do
    bin=$(dirname "$lib")/fa2
    expect_error 3 "$bin without a GPU says so in one line" "$bin"
  done
fi

echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
