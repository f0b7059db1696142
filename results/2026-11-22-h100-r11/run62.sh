#!/usr/bin/env bash
# Run 62 (H100): an experiment, not in step 12: programmatic dependent launch of the
# combine kernel (Hopper: the split kernel lets the combine kernel's blocks be launched
# once it has issued its first loads; they wait at griddepcontrol.wait until the split
# kernel has finished and its writes are visible), so the second launch and its ramp
# overlap the split kernel's tail. The variant is step 12 with the pieces below replaced
# (tools/variant_src.py); GPU matrix on it, then three rounds against step 12 at the
# decode shapes (tools/ab.sh).
# usage: bash run62.sh RUN_NUMBER
set -uo pipefail
cd "$(dirname "$0")/../.."
run=${1:?usage: run62.sh RUN_NUMBER}
out=${OUT:-build/run$run}; mkdir -p "$out"
rm -rf steps/07_hopper_wgmma steps/08_hopper_wgmma
make -s -j16 build/step12/fa2 build/tests/gpu_matrix harness >/dev/null 2>&1 || exit 1
mkdir -p build/ab
python3 tools/variant_src.py steps/12_split_kv/kernel.cu build/ab/pdl.cu \
  '    cp_async_commit();
    }

' '    cp_async_commit();
    }
    asm volatile("griddepcontrol.launch_dependents;");  // the combine kernel may be launched now

' \
  '    if (row >= n_rows) return;' '    asm volatile("griddepcontrol.wait;" ::: "memory");  // the split kernel has finished, its writes visible
    if (row >= n_rows) return;' \
  '        combine_kernel<T, D><<<(unsigned)((n_rows + COMBINE_WARPS - 1) / COMBINE_WARPS), COMBINE_WARPS * 32, 0, stream>>>(*p, plan.splits, o_part, lse_part);' \
  '        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)((n_rows + COMBINE_WARPS - 1) / COMBINE_WARPS));
        cfg.blockDim = dim3(COMBINE_WARPS * 32);
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        FA2_CUDA_TRY(cudaLaunchKernelEx(&cfg, combine_kernel<T, D>, *p, plan.splits, (const float *)o_part, (const float *)lse_part));' \
  || exit 1
make -s variant step=12 NAME=pdl SRC=build/ab/pdl.cu || exit 1
build/tests/gpu_matrix build/variants/pdl/libfa2.so >"$out/run$run-gpu-matrix-pdl.log" 2>&1
echo "matrix on the variant: $(grep -c '^PASS' "$out/run$run-gpu-matrix-pdl.log") passed, $(grep -c '^FAIL' "$out/run$run-gpu-matrix-pdl.log") failed"
bash tools/ab.sh "$out/run$run-ab.csv" 3 decode s12=build/step12/fa2 pdl=build/variants/pdl/fa2
