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
