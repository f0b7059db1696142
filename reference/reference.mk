# reference/reference.mk - the peers the steps are measured against, included by the top Makefile:
#   build/reference/cublas/fa2, libfa2.so  the unfused cuBLAS baseline behind the fa2.h ABI
#   build/reference/mma_ceiling            the measured mma.sync m16n8k16 peak of this GPU
#   build/reference/wgmma_ceiling          the measured wgmma m64n256k16 peak (Hopper, sm_90a only)
#   build/reference/bandwidth_ceiling      the measured streaming-read bandwidth of the GPU's memory
# Uses NVCC, NVCCFLAGS, NVCC_OPTS, GENCODE, GENCODE_HOPPER, CUDA_LIBS, BUILD, HARNESS_O and NVCC_STAMP
# of the top Makefile.

REFERENCE_TARGETS := $(BUILD)/reference/cublas/fa2 $(BUILD)/reference/cublas/libfa2.so $(BUILD)/reference/mma_ceiling \
                     $(BUILD)/reference/wgmma_ceiling $(BUILD)/reference/bandwidth_ceiling

# cuBLAS is a shared library; the rpath is the directory CUDA_LIBS links from, so the
# binary and the .so (dlopen'ed by the test matrix, ctypes) find it without LD_LIBRARY_PATH.
REFERENCE_CUBLAS_LIBS := -lcublas $(patsubst -L%,-Xlinker -rpath=%,$(filter -L%,$(CUDA_LIBS)))

$(BUILD)/reference/cublas/kernel.o: reference/cublas_unfused.cu common/*.h $(NVCC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/reference/cublas/fa2: $(BUILD)/reference/cublas/kernel.o $(BUILD)/common/main.o $(HARNESS_O)
	$(NVCC) $(GENCODE) -Xcompiler -fopenmp $^ $(CUDA_LIBS) $(REFERENCE_CUBLAS_LIBS) -o $@

$(BUILD)/reference/cublas/libfa2.so: $(BUILD)/reference/cublas/kernel.o $(STEP_LIB_O)
	$(NVCC) $(GENCODE) -shared $^ $(CUDA_LIBS) $(REFERENCE_CUBLAS_LIBS) -o $@

$(BUILD)/reference/mma_ceiling: reference/mma_ceiling.cu reference/probe.h common/cuda_check.h common/exit_codes.h $(NVCC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< $(CUDA_LIBS) -o $@

# wgmma exists only in sm_90a: built for that target alone, as the Hopper steps are.
$(BUILD)/reference/wgmma_ceiling: reference/wgmma_ceiling.cu reference/probe.h common/cuda_check.h common/exit_codes.h
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_OPTS) $(GENCODE_HOPPER) $< $(CUDA_LIBS) -o $@

$(BUILD)/reference/bandwidth_ceiling: reference/bandwidth_ceiling.cu reference/probe.h common/cuda_check.h common/exit_codes.h \
                                      $(BUILD)/common/flush.o $(NVCC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $< $(BUILD)/common/flush.o $(CUDA_LIBS) -o $@
