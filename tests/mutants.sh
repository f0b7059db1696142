#!/usr/bin/env bash
# Proves the GPU matrix fails on bugs it exists to catch. Each mutant is step 06
# with one planted bug (named in its fa2_name); all are built as shared libraries
# and run through build/tests/gpu_matrix together, and each must draw at least
# one FAIL line. With --against COMMIT, the matrix of that commit runs on the
# same mutants too, to show which of them it let through.
# usage: bash tests/mutants.sh [--against COMMIT]     (on a GPU machine, after make all)
set -uo pipefail
cd "$(dirname "$0")/.."
dir=build/mutants
rm -rf "$dir"; mkdir -p "$dir"
src=steps/06_staged_epilogue/kernel.cu
# name | text in the kernel | its replacement
mutants=(
  "no_lazy_rescale|__any_sync(0xffffffffu, grown)|nb == 0"
  "nan_lse_as_no_key|l_run[mt][r] != 0.0f ? (m_run|l_run[mt][r] > 0.0f ? (m_run"
  "o_rows_past_seqlen|if (m0 + row < p.seqlen_q)|if (true)"
  "default_stream|<<<grid, C::THREADS, smem_bytes, stream>>>|<<<grid, C::THREADS, smem_bytes, 0>>>"
  "small_grid_never|*config = *blocks <= *sm_count ? SMALL_GRID : LARGE_GRID;|*config = LARGE_GRID;"
)
make -s all >/dev/null || { echo "FAIL make all"; exit 1; }
arch=${ARCH:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')}
libs=()
for m in "${mutants[@]}"; do
  IFS='|' read -r name from to <<<"$m"
  mkdir -p "$dir/$name"
  python3 - "$src" "$dir/$name/kernel.cu" "$from" "$to" "$name" <<'PY' || { echo "FAIL mutant $name: its text is not in $src"; exit 1; }
import sys
src, dst, old, new, name = sys.argv[1:]
s = open(src).read()
if s.count(old) != 1: sys.exit(1)
s = s.replace(old, new).replace('"06_staged_epilogue"', '"06_mutant_' + name + '"')
s = s.replace('#include "../../common/', '#include "../../../common/')
open(dst, "w").write(s)
PY
  ( nvcc -O3 -std=c++17 -Xcompiler -fPIC -gencode "arch=compute_$arch,code=sm_$arch" -shared "$dir/$name/kernel.cu" \
      build/common/validate.o -o "$dir/$name/libfa2.so" >"$dir/$name/build.log" 2>&1 || echo "FAIL build mutant $name" ) &
  libs+=("$dir/$name/libfa2.so")
done
wait
build/tests/gpu_matrix "${libs[@]}" >"$dir/matrix.log" 2>&1
if [ "${1:-}" = --against ]; then
  old="$dir/old"; mkdir -p "$old"
  git archive "$2" common tests | tar -x -C "$old"
  gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -fopenmp -I/usr/local/cuda/include "$old"/tests/gpu_matrix.c \
      $(ls "$old"/common/*.c | grep -v main.c) -L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lm \
      -o "$old/gpu_matrix" 2>"$old/build.log" || echo "FAIL build the matrix of $2"
  "$old/gpu_matrix" "${libs[@]}" >"$dir/matrix-$2.log" 2>&1
fi
for m in "${mutants[@]}"; do
  name=${m%%|*}
  fails=$(grep -c "^FAIL 06_mutant_$name" "$dir/matrix.log")
  [ "$fails" -gt 0 ] && echo "PASS the matrix catches mutant $name ($fails failing cases)" ||
    echo "FAIL the matrix lets mutant $name through"
  if [ "${1:-}" = --against ]; then
    echo "# matrix of $2 on mutant $name: $(grep -c "^FAIL 06_mutant_$name" "$dir/matrix-$2.log") failing cases"
  fi
done
