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
    rm -rf "$dst" && mkdir -p "$dst"
    tar --exclude=./build --exclude=./.ab-base --exclude=./.git -cf - . | tar -xf - -C "$dst"
    [ -z "$overlay" ] || cp -r ".ab-base/$overlay/." "$dst/"
    (cd "$dst" && make -s -j16 all >"$build_log" 2>&1) && touch "$dst/.built"
  fi
  echo "$dst"
}

# What every GPU run script does first, after sourcing this file:
#   run_start LOGDIR
# makes LOGDIR (kept in $log) and writes its first line: stage TEXT prints TEXT with the time
# and appends it to LOGDIR/progress.txt; copy_of NAME is the built copy build/tree-NAME of the
# work tree with overlay NAME laid over it (NAME main: none), made once.
run_start() {
  log=$(realpath -m "$1")
  mkdir -p "$log"
  stage "start on $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader)"
}
stage() { echo "$(date -u +%T) $*" | tee -a "$log/progress.txt"; }
copy_of() { tree_copy "$PWD/build/tree-$1" "$log/build-$1.log" "$([ "$1" = main ] || echo "$1")"; }
