#!/usr/bin/env bash
# make step=NN info: what the compiler made of a step's kernel -- registers,
# shared memory, spills (ptxas), and the SASS instructions that matter for
# FlashAttention: HMMA (mma.sync), HGMMA (wgmma), LDSM (ldmatrix), STSM (stmatrix), LDGSTS
# (cp.async), UTMALDG/UTMASTG (TMA loads and stores), SYNCS (mbarrier operations),
# LDS/STS (ordinary shared loads/stores), MUFU.EX2 (exp2), BAR (barriers),
# LDL/STL (local memory: spills).
# usage: bash tools/info.sh STEP_DIR BUILD_DIR "NVCC FLAGS..."
set -euo pipefail
step_dir=$1 build_dir=$2 nvcc_flags=$3
src=$(ls "$step_dir"/kernel.cu 2>/dev/null || true)
if [ -z "$src" ]; then echo "$(basename "$step_dir") runs on the CPU: no kernel to inspect"; exit 0; fi
NVCC=${NVCC:-nvcc}
# fa2_mma_kernel<__half, 128, TileConfig<4, 2, 64>> (mangled) -> "fp16 d128 4x2x64";
# steps 10-12's TileConfig<12, 1, 128> (consumer warps, m-tiles, keys) -> "fp16 d64 12x1x128"
# A kernel other than the steps' main fa2_mma_kernel is named first (step 13's fa2_split_kernel,
# step 14's fa2_bwd_kernel<__half, 128, 2> -> "fa2_bwd_kernel fp16 d128 2").
name_fn='function kernel_name(f,   t, d, c, n, id) {
  if (match(f, /^_Z[0-9]+/)) { n = substr(f, 3, RLENGTH - 2) + 0; id = substr(f, RLENGTH + 1, n) }
  t = (f ~ /bfloat16/) ? "bf16" : "fp16"
  if (match(f, /(half|bfloat16)Li[0-9]+E/)) { d = substr(f, RSTART, RLENGTH); gsub(/[^0-9]/, "", d); sub(/^16/, "", d) }
  if (match(f, /ConfigI(Li[0-9]+E)+/)) {
    c = substr(f, RSTART + 7, RLENGTH - 7); gsub(/Li/, "", c); gsub(/E/, "x", c); sub(/x$/, "", c) }
  if (c == "" && match(f, /Li[0-9]+ELi[0-9]+EE/)) { c = substr(f, RSTART, RLENGTH); sub(/^Li[0-9]+ELi/, "", c); sub(/EE$/, "", c) }
  return (id == "" || id == "fa2_mma_kernel" ? "" : id " ") t " d" d (c == "" ? "" : " " c) }'
echo "== $(basename "$step_dir"): ptxas resources (one line per architecture and instantiation: dtype, head dim, tiles)"
# shellcheck disable=SC2086
$NVCC $nvcc_flags -Xptxas -v -c "$src" -o /dev/null 2>&1 |
  awk "$name_fn"'
       /Compiling entry function/ {match($0, /_Z[^ '"'"']*/); fn = kernel_name(substr($0, RSTART, RLENGTH))
                                   if (match($0, /sm_[0-9]+a?/)) fn = substr($0, RSTART, RLENGTH) " " fn}
       /bytes stack frame/ {stack = $0; sub(/^ */, "", stack)}
       /Used [0-9]+ registers/ {sub(/^ *ptxas info *: */, ""); printf "  %-24s %-44s %s\n", fn, $0, stack}' | sort
obj=$build_dir/kernel.o
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$CUOBJDUMP" ]; then
  echo "cuobjdump not found (it ships with the full CUDA Toolkit): no SASS instruction mix"; exit 0
fi
# cuobjdump -sass disassembles with nvdisasm, which a toolkit from PyPI's wheels may lack
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
if ! "$CUOBJDUMP" -sass "$obj" >"$sass" 2>&1; then
  echo "no SASS instruction mix: $CUOBJDUMP -sass failed: $(grep -m 1 -i 'fatal\|error' "$sass" || tail -n 1 "$sass")"; exit 0
fi
echo "== SASS instruction mix of $obj (static counts per kernel and GPU architecture; the main loop dominates at run time)"
want="HMMA HGMMA LDSM STSM LDGSTS UTMALDG UTMASTG SYNCS LDS STS MUFU.EX2 BAR LDL STL"
printf "  %-24s" kernel; printf " %8s" $want; echo
awk -v want="$want" "$name_fn"'
  /^arch = / { arch = $3 }
  /Function : / { fn = arch " " kernel_name($3) }
  match($0, /\/\*[0-9a-f]+\*\/ +(@!?U?P[0-9T]+ +)?[A-Z][A-Z0-9_.]+/) {
    ins = substr($0, RSTART, RLENGTH); sub(/.*\*\/ +(@!?U?P[0-9T]+ +)?/, "", ins); split(ins, part, ".")
    op = part[1]; if (op == "MUFU") op = "MUFU." part[2]
    n[fn, op]++; fns[fn] = 1 }
  END {
    k = split(want, w, " ")
    for (f in fns) { printf "  %-24s", f; for (i = 1; i <= k; i++) printf " %8d", n[f, w[i]]; printf "\n" } }' "$sass" | sort
