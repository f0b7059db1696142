#!/usr/bin/env bash
# Property checks of the scratch visualizers, one line per case: "PASS name",
# "FAIL name: why" or "SKIP name: why"; a failure makes the exit code non-zero.
# Each program's --check asserts its own maps (bijections, conflict-free
# swizzled patterns, exact copy coverage, ...); this script builds the programs,
# passes those lines on, and checks the command line of every program. On a
# machine with a GPU it also runs the hardware verifiers (verify.cu, and
# verify_wgmma.cu and verify_wgmma_backward.cu, which run on compute capability 9.0 and skip
# elsewhere, and verify_tma.cu).
set -u
cd "$(dirname "$0")/.."
scratch_make=(make -s -f scratch/scratch.mk)
bin=build/scratch
pass=0 fail=0 skip=0

result() { # result PASS|FAIL|SKIP "name" ["why"]
  case $1 in PASS) pass=$((pass+1));; FAIL) fail=$((fail+1));; SKIP) skip=$((skip+1));; esac
  if [ "$1" = PASS ]; then echo "PASS $2"; else echo "$1 $2${3:+: $3}"; fi
}

relay() { # relay NAME COMMAND...: passes on the PASS/FAIL/SKIP/# lines a program prints
  local name=$1 out rc line; shift
  out=$("$@" 2>&1); rc=$?
  while IFS= read -r line; do
    case $line in
      "PASS "*) pass=$((pass+1)); echo "$line";;
      "FAIL "*) fail=$((fail+1)); echo "$line";;
      "SKIP "*) skip=$((skip+1)); echo "$line";;
      "# "*) echo "$line";;
    esac
  done <<<"$out"
  if [ $rc -ne 0 ] && ! grep -q '^FAIL ' <<<"$out"; then
    result FAIL "$name exited with $rc and no FAIL line" "$(tail -n 3 <<<"$out" | tr '\n' ' ')"
  fi
}

expect_run() { # expect_run "args" PROGRAM ARGS...: exit 0, output on stdout only, same twice, no colour when piped
  local args=$1 out again err rc; shift
  out=$("$@" 2>"$bin/stderr"); rc=$?; err=$(cat "$bin/stderr")
  again=$("$@" 2>/dev/null)
  if [ $rc -ne 0 ]; then result FAIL "scratch $(basename "$1") $args" "exit $rc: $err"
  elif [ -z "$out" ] || [ -n "$err" ]; then result FAIL "scratch $(basename "$1") $args" "$(wc -l <<<"$out") stdout lines, stderr '$err'"
  elif [ "$out" != "$again" ]; then result FAIL "scratch $(basename "$1") $args" "two runs printed different output"
  elif [[ $out == *$'\033'* ]]; then result FAIL "scratch $(basename "$1") $args" "ANSI colour in piped output"
  elif grep -q MISMATCH <<<"$out"; then result FAIL "scratch $(basename "$1") $args" "$(grep -m1 MISMATCH <<<"$out")"
  else result PASS "scratch $(basename "$1") $args: exit 0, $(wc -l <<<"$out") lines, deterministic, plain when piped"; fi
}

expect_refusal() { # expect_refusal PROGRAM ARGS...: exit 2, one "error: " line on stderr, nothing on stdout
  local out rc
  out=$("$@" 2>"$bin/stderr"); rc=$?
  if [ $rc -eq 2 ] && [ -z "$out" ] && [ "$(wc -l <"$bin/stderr")" -eq 1 ] && grep -q '^error: ' "$bin/stderr"; then
    result PASS "scratch $(basename "$1") refuses '${*:2}' -> $(cat "$bin/stderr")"
  else
    result FAIL "scratch $(basename "$1") refuses '${*:2}'" "exit $rc, stdout '$out', stderr '$(cat "$bin/stderr")'"
  fi
}

if build_log=$("${scratch_make[@]}" scratch-build 2>&1); then
  result PASS "build scratch programs"
else
  result FAIL "build scratch programs" "$(tail -n 5 <<<"$build_log" | tr '\n' ' ')"
  echo "scratch: $pass passed, $fail failed, $skip skipped"
  exit 1
fi

for name in $("${scratch_make[@]}" scratch-names); do
  program=$bin/$name
  if "$program" --help | grep -q '^usage: '; then result PASS "scratch $name --help"
  else result FAIL "scratch $name --help" "no usage line or non-zero exit"; fi
  expect_run "(default args)" "$program"
  expect_refusal "$program" --frobnicate
  relay "$name --check" "$program" --check
done

expect_run "--only p" "$bin/mma_fragments" --only p
expect_run "--n 128 --only p" "$bin/wgmma_fragments" --n 128 --only p
expect_run "--n=256 --cols=32 --only=d" "$bin/wgmma_fragments" --n=256 --cols=32 --only=d
expect_run "--use v --dim 64" "$bin/ldmatrix" --use v --dim 64
expect_run "--dim 64 --rows 16" "$bin/swizzle" --dim 64 --rows 16
expect_run "--dim 128 --show k-frag" "$bin/bank_conflicts" --dim 128 --show k-frag
expect_run "--dim 64 --show v-ldsm" "$bin/bank_conflicts" --dim 64 --show v-ldsm
expect_run "--dim=64 --rows=17 --heads=3" "$bin/copy_layout" --dim=64 --rows=17 --heads=3
expect_run "--causal 0 --seqlen-q 200 --seqlen-k 65" "$bin/backward_blocks" --causal 0 --seqlen-q 200 --seqlen-k 65
expect_run "--heads 8 --kv-heads 2 --seqlen-q=1000 --seqlen-k=77 --dim 64" "$bin/backward_blocks" --heads 8 --kv-heads 2 --seqlen-q=1000 --seqlen-k=77 --dim 64
expect_run "--seqlen-q 300 --format csv" "$bin/backward_blocks" --seqlen-q 300 --format csv
expect_run "--block-keys 64 --heads 4 --kv-heads 1 --seqlen-q 333 --seqlen-k 500" "$bin/backward_blocks" --block-keys 64 --heads 4 --kv-heads 1 --seqlen-q 333 --seqlen-k 500
expect_run "--block-keys=64 --dim 64 --format csv" "$bin/backward_blocks" --block-keys=64 --dim 64 --format csv
expect_run "--staged 0 --dim 64" "$bin/backward_blocks" --staged 0 --dim 64
expect_run "--block-queries 128 --dim 64 --heads 4 --kv-heads 2 --seqlen-q 333" "$bin/backward_blocks" --block-queries 128 --dim 64 --heads 4 --kv-heads 2 --seqlen-q 333
expect_run "--dim 64" "$bin/backward_wgmma" --dim 64
expect_run "--plan noswap --dim=128" "$bin/backward_wgmma" --plan noswap --dim=128
expect_run "--plan=noswap --dim 64 --format csv" "$bin/backward_wgmma" --plan=noswap --dim 64 --format csv
expect_run "--format csv" "$bin/backward_wgmma" --format csv
expect_run "--format stmatrix --dim 64" "$bin/backward_wgmma" --format stmatrix --dim 64
expect_refusal "$bin/swizzle" --dim 96
expect_refusal "$bin/swizzle" --rows
expect_refusal "$bin/copy_layout" --heads 0
expect_refusal "$bin/bank_conflicts" --show everything
expect_refusal "$bin/mma_fragments" --only d
expect_refusal "$bin/wgmma_fragments" --n 96
expect_refusal "$bin/wgmma_fragments" --only b
expect_refusal "$bin/wgmma_fragments" --cols 12
expect_refusal "$bin/wgmma_fragments" --n 64 --cols 128
expect_refusal "$bin/backward_blocks" --heads 4 --kv-heads 3
expect_refusal "$bin/backward_blocks" --causal 2
expect_refusal "$bin/backward_blocks" --block-keys 96
expect_refusal "$bin/backward_blocks" --staged 1 --block-keys 64
expect_refusal "$bin/backward_blocks" --block-queries 128 --staged 0
expect_refusal "$bin/backward_wgmma" --dim 96
expect_refusal "$bin/backward_wgmma" --plan both
expect_refusal "$bin/backward_wgmma" --plan noswap --format stmatrix

# The GPU verifiers: they must build wherever nvcc is; they run only where a GPU answers
# (verify_wgmma and verify_wgmma_backward print one SKIP line on a GPU other than compute capability 9.0).
for name in verify verify_wgmma verify_wgmma_backward verify_tma; do
  if verify_log=$("${scratch_make[@]}" "$bin/$name" 2>&1); then
    result PASS "build scratch GPU verifier ($bin/$name)"
    if nvidia-smi -L >/dev/null 2>&1; then
      relay "$name" "$bin/$name"
    else
      out=$("$bin/$name" 2>&1); rc=$?
      if [ $rc -eq 0 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && [[ $out == "SKIP $name: no usable GPU"* ]]; then
        result PASS "scratch $name without a GPU prints one SKIP line and exits 0"
      else result FAIL "scratch $name without a GPU" "exit $rc: $out"; fi
      result SKIP "scratch GPU verification ($name)" "no GPU (nvidia-smi found none)"
    fi
  elif grep -qiE 'nvcc.*(not found|no such file)' <<<"$verify_log"; then
    result SKIP "build scratch GPU verifier ($name)" "no nvcc: $(head -n 1 <<<"$verify_log")"
  else
    result FAIL "build scratch GPU verifier ($name)" "$(tail -n 5 <<<"$verify_log" | tr '\n' ' ')"
  fi
done
rm -f "$bin/stderr"

echo "scratch: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
