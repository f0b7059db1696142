# shellcheck shell=bash
# tools/tree_copy.sh - sourced by the GPU run scripts under results/: a copy of the work tree
# to build and run in, so that what a device call's sync rewrites in the repository root
# (it removes files it does not know) never touches a run in progress.
#   tree_copy DST BUILD_LOG [OVERLAY]
# makes DST (once: DST/.built marks it) from the work tree without build/, .ab-base/ and .git/,
# lays the folder .ab-base/OVERLAY over it (a branch's changed files: run89.sh --overlays),
# builds every step into BUILD_LOG, and prints DST. An OVERLAY that is missing returns 3 and
# makes nothing: a copy without it would time main against main (a device call made without
# carrying .ab-base removes the folder there).
tree_copy() {
  local dst=$1 build_log=$2 overlay=${3:-}
  if [ ! -f "$dst/.built" ]; then
    [ -z "$overlay" ] || [ -d ".ab-base/$overlay" ] || { echo "overlay .ab-base/$overlay is missing: stopping" >&2; return 3; }
    copy_tree "$dst" >/dev/null
    [ -z "$overlay" ] || cp -r ".ab-base/$overlay/." "$dst/"
    (cd "$dst" && make -s -j16 all >"$build_log" 2>&1) && touch "$dst/.built"
  fi
  echo "$dst"
}

#   copy_tree DST
# makes DST afresh from the work tree without build/, .ab-base/ and .git/, builds nothing, and
# prints DST (a run that builds only the binaries it times).
copy_tree() {
  rm -rf "$1" && mkdir -p "$1" && tar --exclude=./build --exclude=./.ab-base --exclude=./.git -cf - . | tar -xf - -C "$1" && echo "$1"
}

# What every GPU run script does first, after sourcing this file:
#   run_start LOGDIR
# makes LOGDIR (kept in $log) and writes its first line: stage TEXT prints TEXT with the time
# and appends it to LOGDIR/progress.txt; copy_of NAME is the built copy build/tree-NAME of the
# work tree with overlay NAME laid over it (NAME main: none), made once.
# On a host of several GPUs, RUN_GPU=N gives the run GPU N alone: CUDA_VISIBLE_DEVICES=N for
# everything it starts, nvidia-smi reading that GPU, and copies of its own (build/gpuN/tree-NAME),
# so that runs on other GPUs of the host never build, test or compare in the same copy.
run_start() {
  log=$(realpath -m "$1")
  mkdir -p "$log"
  gpu=${RUN_GPU:-0}
  if [ -n "${RUN_GPU:-}" ]; then export CUDA_VISIBLE_DEVICES=$gpu; trees=build/gpu$gpu/tree; else trees=build/tree; fi
  stage "start on $(nvidia-smi -i "$gpu" --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
}
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
copy_of() { tree_copy "$PWD/$trees-$1" "$log/build-$1.log" "$([ "$1" = main ] || echo "$1")"; }

# check_step NN NAME: step NN's GPU matrix and compute-sanitizer (at once) in NAME's copy, their
# logs gzipped into LOGDIR; fails on any FAIL line.
check_step() {
  local tree
  tree=$(copy_of "$2") || return 3
  (cd "$tree" && check_binaries "$1" "$2" "build/step$1/fa2" "build/step$1/libfa2.so")
}

# check_binaries NN NAME BINARY LIBRARY: the same for a build of step NN in the current
# directory (a variant's: build/variants/X/fa2 and libfa2.so): the GPU matrix on LIBRARY,
# compute-sanitizer on BINARY, the first FAIL lines into LOGDIR's progress, the logs
# (matrixNN-NAME.log, sanitizeNN-NAME.log) gzipped; fails on any FAIL line.
check_binaries() {
  local id=$1 name=$2 matrix="$log/matrix$1-$2.log" sanitize="$log/sanitize$1-$2.log" failed
  bash tools/sanitize.sh "$3" >"$sanitize" 2>&1 &
  build/tests/gpu_matrix "$4" >"$matrix" 2>&1
  stage "gpu_matrix step $id $name: exit $?: $(grep -c "^PASS ${id}_" "$matrix") PASS $(grep -c "^FAIL ${id}_" "$matrix") FAIL"
  wait $!
  stage "  sanitize step $id $name: $(grep -c '^PASS' "$sanitize") PASS $(grep -c '^FAIL' "$sanitize") FAIL"
  grep -h '^FAIL' "$matrix" "$sanitize" | head -n 20 | tee -a "$log/progress.txt"
  failed=$(cat "$matrix" "$sanitize" | grep -c '^FAIL')
  gzip -f "$matrix" "$sanitize"
  [ "$failed" = 0 ]
}

# ab_no_slower NN NAME SET: tools/ab.sh, 3 rounds, main's step NN against NAME's at SET (a
# shapes.txt set and harness arguments, "backward --backward"); succeeds when NAME's medians of
# the rows it times (the backward's, with --backward) add up to no more than main's.
ab_no_slower() {
  local id=$1 name=$2 set=$3 tree main_tree rows
  tree=$(copy_of "$name") && main_tree=$(copy_of main) || return 3
  (cd "$tree" && bash tools/ab.sh "$log/ab$id-$name.csv" 3 "$set" main="$main_tree/build/step$id/fa2" new="build/step$id/fa2") \
    >"$log/ab$id-$name.log" 2>&1
  stage "ab step $id $name: exit $?"
  rows=$(case $set in *--backward*) echo ' bwd ' ;; *) echo ' ' ;; esac)
  grep -A40 '^medians' "$log/ab$id-$name.log" | tee -a "$log/progress.txt" /dev/stderr |
    awk -v rows="$rows" 'NR > 2 && index($0, rows) { m += $(NF-1); n += $NF; k++ } END { exit !(k > 0 && n <= m) }'
}

# compare_set NAME SET: make compare SHAPES=SET in NAME's copy, its CSVs into LOGDIR/SET-NAME,
# with nvidia-smi sampling the SM clock, power, temperature and clock-event reasons every 200 ms
# beside it (LOGDIR/clocks-SET-NAME.csv.gz; only read, never set); the stage line gives the SM
# clock's minimum, median and maximum over the run.
compare_set() {
  local name=$1 set=$2 tree sampler rc reasons=clocks_event_reasons.active
  tree=$(copy_of "$name") || return 3
  # clocks_event_reasons since driver 535, clocks_throttle_reasons before
  nvidia-smi -i "$gpu" --query-gpu=$reasons --format=csv,noheader >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
  nvidia-smi -i "$gpu" --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,$reasons --format=csv -lms 200 \
    >"$log/clocks-$set-$name.csv" 2>&1 &
  sampler=$!
  (cd "$tree" && rm -f results/compare-*.csv results/ceiling-*.csv results/bandwidth-*.csv &&
    PYTHONUNBUFFERED=1 make -s compare SHAPES="$set") >"$log/compare-$set-$name.log" 2>&1
  rc=$?
  kill $sampler 2>/dev/null
  stage "compare $set $name: exit $rc; SM clock (MHz) min/median/max: $(awk -F', ' 'NR > 1 && $2 + 0 > 0 { print $2 + 0 }' \
    "$log/clocks-$set-$name.csv" | sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[1] "/" v[int((NR + 1) / 2)] "/" v[NR]; else print "none" }')"
  mkdir -p "$log/$set-$name"
  cp "$tree"/results/compare-*.csv "$tree"/results/ceiling-*.csv "$tree"/results/bandwidth-*.csv "$log/$set-$name/" 2>/dev/null
  gzip -f "$log/compare-$set-$name.log" "$log/clocks-$set-$name.csv"
  return $rc
}
