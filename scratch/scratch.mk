# scratch.mk - the layout visualizers (scratch/*.c) and the GPU verifiers (scratch/verify.cu,
# scratch/verify_wgmma.cu, scratch/verify_wgmma_backward.cu, scratch/verify_tma.cu).
# Included by the top Makefile, which defines CC, NVCC, GENCODE and BUILD; the defaults below
# only serve `make -f scratch/scratch.mk ...` (what scratch/test.sh runs), so it also works alone.
#
#   make scratch                               build and run every visualizer with default args
#   make scratch name=swizzle ARGS="--dim 64"  run one (name=verify, verify_wgmma, verify_wgmma_backward, verify_tma: the GPU verifiers)
#   make scratch-test                          the property checks (scratch/test.sh)

CUDA    ?= /usr/local/cuda
NVCC    ?= $(CUDA)/bin/nvcc
BUILD   ?= build
# PTX for sm_80 as well as its SASS, so the standalone build also runs on newer GPUs (JIT).
GENCODE ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_80,code=compute_80
# wgmma exists only in the Hopper target sm_90a, whose code runs on compute capability 9.0 alone
# (the top Makefile defines it; this default serves the standalone use).
GENCODE_HOPPER ?= -gencode arch=compute_90a,code=sm_90a
# TMA exists from compute capability 9.0 on: sm_90 and the PTX of compute_90 (the top
# Makefile's GENCODE_TMA adds any newer ARCH).
GENCODE_TMA ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90

SCRATCH_NAMES        := mma_fragments wgmma_fragments ldmatrix swizzle bank_conflicts copy_layout quad_shuffle tiling ws_schedule persistent_schedule split_kv backward_blocks backward_wgmma ring_schedule
SCRATCH_PROGRAMS     := $(SCRATCH_NAMES:%=$(BUILD)/scratch/%)
SCRATCH_VERIFY       := $(BUILD)/scratch/verify
SCRATCH_VERIFY_WGMMA := $(BUILD)/scratch/verify_wgmma
SCRATCH_VERIFY_TMA   := $(BUILD)/scratch/verify_tma
SCRATCH_VERIFY_WGMMA_BWD := $(BUILD)/scratch/verify_wgmma_backward
SCRATCH_HEADERS      := scratch/layouts.h scratch/tool.h

name ?=

.PHONY: scratch scratch-build scratch-names scratch-test

$(BUILD)/scratch/%: scratch/%.c $(SCRATCH_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) -O2 -std=c11 -Wall -Wextra $< -o $@ -lm

$(SCRATCH_VERIFY): scratch/verify.cu $(SCRATCH_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(GENCODE) -Xcompiler -Wall $< -o $@

$(SCRATCH_VERIFY_WGMMA): scratch/verify_wgmma.cu $(SCRATCH_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(GENCODE_HOPPER) -Xcompiler -Wall $< -o $@

$(SCRATCH_VERIFY_WGMMA_BWD): scratch/verify_wgmma_backward.cu $(SCRATCH_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(GENCODE_HOPPER) -Xcompiler -Wall $< -o $@

$(SCRATCH_VERIFY_TMA): scratch/verify_tma.cu $(SCRATCH_HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(GENCODE_TMA) -Xcompiler -Wall $< -o $@

scratch-build: $(SCRATCH_PROGRAMS)

scratch-names:
	@echo $(SCRATCH_NAMES)

scratch: $(if $(filter verify,$(name)),$(SCRATCH_VERIFY),$(if $(filter verify_wgmma,$(name)),$(SCRATCH_VERIFY_WGMMA),$(if $(filter verify_tma,$(name)),$(SCRATCH_VERIFY_TMA),$(if $(filter verify_wgmma_backward,$(name)),$(SCRATCH_VERIFY_WGMMA_BWD),$(SCRATCH_PROGRAMS)))))
	@if [ -z "$(name)" ]; then \
	  for p in $(SCRATCH_NAMES); do echo "== $$p"; $(BUILD)/scratch/$$p || exit 1; echo; done; \
	else \
	  case " $(SCRATCH_NAMES) verify verify_wgmma verify_wgmma_backward verify_tma " in *" $(name) "*) ;; \
	  *) echo "error: name='$(name)' is not allowed (allowed: $(SCRATCH_NAMES) verify verify_wgmma verify_wgmma_backward verify_tma)"; exit 2;; esac; \
	  $(BUILD)/scratch/$(name) $(ARGS); \
	fi

scratch-test:
	@bash scratch/test.sh
