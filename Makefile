# FlashAttention-2 forward, built step by step. `make help` lists the targets.

CUDA       ?= /usr/local/cuda
NVCC       ?= $(CUDA)/bin/nvcc
CC         ?= gcc
BUILD      := build
PYTHON     ?= python3

# GPU architecture: the first GPU's compute capability (ARCH=90 to override, ARCH=120 for
# an RTX 50xx; README "Building for your GPU" lists the toolkit each needs); with no GPU,
# build for every sm_80+ family so the steps still compile.
ARCH       ?= $(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
ARCHS      := $(if $(strip $(ARCH)),$(ARCH),80 86 89 90)
# SASS runs only on its own family (and newer minors of it): the PTX of the highest
# arch rides along, so the driver can JIT it on a GPU newer than all of them (sm_100, sm_120).
ARCH_PTX   := $(shell printf '%s\n' $(ARCHS) | sort -n | tail -n 1)
GENCODE    := $(foreach a,$(ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
              -gencode arch=compute_$(ARCH_PTX),code=compute_$(ARCH_PTX)

CFLAGS     := -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -fPIC -fopenmp -I$(CUDA)/include
NVCC_OPTS  := -O3 -std=c++17 -lineinfo -Xcompiler -fPIC,-Wall
NVCCFLAGS  := $(NVCC_OPTS) $(GENCODE)
# The Hopper steps use instructions that exist only in the target sm_90a (wgmma,
# setmaxnreg): they are always built for that target alone, whatever ARCH says, and
# on any other GPU they refuse to run, in one line. (`make hopper-steps` lists them;
# `make portable-steps` the others, built for ARCH.)
HOPPER_STEPS   := 09 10 11 12 15
GENCODE_HOPPER := -gencode arch=compute_90a,code=sm_90a
# The TMA steps need compute capability 9.0 or newer (TMA copies, mbarrier transaction
# counts), not sm_90a: SASS for sm_90 and for any newer ARCH given (ARCH=120: an RTX 50xx),
# and the PTX of compute_90, which the driver compiles for any newer GPU. On an 8.x GPU they
# refuse to run, in one line. (`make tma-steps` lists them.)
TMA_STEPS      := 08
GENCODE_TMA    := -gencode arch=compute_90,code=sm_90 $(foreach a,$(filter-out 80 86 87 89 90,$(ARCHS)),-gencode arch=compute_$(a),code=sm_$(a)) \
                  -gencode arch=compute_90,code=compute_90
step_gencode = $(if $(filter $(1),$(HOPPER_STEPS)),$(GENCODE_HOPPER),$(if $(filter $(1),$(TMA_STEPS)),$(GENCODE_TMA),$(GENCODE)))
# stdc++: the harness's flush.cu is a C++ object, and C programs link it
CUDA_LIBS  := -L$(CUDA)/lib64 -lcudart_static -ldl -lrt -lpthread -lm -lstdc++
# An object compiled for one ARCH is not reused under another: the objects that nvcc builds
# with $(NVCCFLAGS) (not the Hopper steps', always sm_90a) depend on a stamp file named
# after those flags, which is new (and newer than them) whenever the flags change.
NVCC_STAMP := $(BUILD)/.nvcc-flags-$(shell printf '%s' '$(NVCCFLAGS)' | cksum | cut -d' ' -f1)
$(NVCC_STAMP):
	@mkdir -p $(BUILD) && rm -f $(BUILD)/.nvcc-flags-* && touch $@

# A step is a folder with a kernel file: a folder left empty by a rename is not one.
STEP_DIRS  := $(sort $(patsubst %/,%,$(dir $(wildcard steps/[0-9][0-9]_*/kernel.c*))))
STEP_IDS   := $(foreach d,$(STEP_DIRS),$(firstword $(subst _, ,$(notdir $(d)))))
GPU_IDS    := $(filter-out 00,$(STEP_IDS))
PORTABLE_IDS := $(filter-out $(HOPPER_STEPS) $(TMA_STEPS),$(GPU_IDS))

HARNESS    := cli data reference reference_backward check buffers device flush util validate device_limits
# What a GPU step's shared library links besides its kernel: the ABI's shared checks
# and the device limits every launch decision reads.
STEP_LIB_O := $(BUILD)/common/validate.o $(BUILD)/common/device_limits.o
HARNESS_O  := $(HARNESS:%=$(BUILD)/common/%.o)

step       ?=
STEP_DIR    = $(patsubst %/,%,$(dir $(wildcard steps/$(step)_*/kernel.c*)))

.PHONY: help all run diff info profile sanitize test clean check-step harness variant hopper-steps portable-steps tma-steps
.DEFAULT_GOAL := help

help:
	@echo "make all                      build every step (binary + shared library) and the tests"
	@echo "make step=NN run [ARGS=...]   check and time one step (ARGS: see build/stepNN/fa2 --help)"
	@echo "make step=NN diff             what step NN changed since the step before it"
	@echo "make step=NN info             registers, shared memory, spills, SASS mix (HMMA, LDSM, LDGSTS, MUFU...)"
	@echo "make step=NN profile [ARGS=] [KERNELS=2] [SKIP=3]  Nsight Compute on one launch (or the first N kernels; SKIP: after 3 calls): tensor pipe, issue, stalls, bank conflicts"
	@echo "make step=NN sanitize         compute-sanitizer memcheck, racecheck, synccheck, initcheck"
	@echo "make step=NN variant NAME=X [DEFINES=-D...] [SRC=FILE]  a rebuilt copy in build/variants/X (sweeps, tests)"
	@echo "make compare [SHAPES=all] [ROUNDS=3] [STEPS=\"11 12\"] [BACKENDS=\"flash cudnn fa4\"]  the steps (or those named), the cuBLAS baseline, torch SDPA's backends and FA4 (if installed; or those named) in rounds: the tables"
	@echo "                              (SHAPES=seed, bench, sweep, decode, backward or all; the backward steps 14 and 15"
	@echo "                              only in SHAPES=backward, against torch's backward per backend)"
	@echo "make plots [CSV=...]          PNGs from a compare CSV (default: the newest committed one; matplotlib)"
	@echo "make figures                  the figures of docs/ (docs/figures/*.svg) from the scratch programs' layouts"
	@echo "make scratch [name=NAME ARGS=...]  print layouts: fragments, ldmatrix, swizzle, banks (name=verify: on the GPU)"
	@echo "make test                     CPU tests, every step's build, and the GPU matrix on a GPU"
	@echo "make clean                    remove build/"
	@echo "steps: $(notdir $(STEP_DIRS))"
	@echo "ARCH: $(ARCHS), PTX for compute_$(ARCH_PTX) (override: ARCH=90, ARCH=120...; steps $(HOPPER_STEPS): sm_90a only; step $(TMA_STEPS): sm_90 and newer)"
	@echo "FA2_EMULATE=PRESET make ...  every decision from another GPU's published limits (build/step00/fa2 --help lists them; ARGS=--plan shows a step's choice)"

all: $(foreach i,$(STEP_IDS),$(BUILD)/step$(i)/fa2 $(BUILD)/step$(i)/libfa2.so) test-programs reference-programs

hopper-steps:
	@echo $(HOPPER_STEPS)

# the GPU steps built for ARCH (tests/run.sh builds them for another ARCH too)
portable-steps:
	@echo $(PORTABLE_IDS)

tma-steps:
	@echo $(TMA_STEPS)

check-step:
	@if [ -z "$(step)" ] || [ -z "$(STEP_DIR)" ]; then \
	  echo "error: step='$(step)' is not allowed (allowed: $(STEP_IDS))"; exit 2; fi

run: check-step
	@$(MAKE) -s $(BUILD)/step$(step)/fa2
	@$(BUILD)/step$(step)/fa2 $(ARGS)

# A step diffs against the step before it, or against the step its header names
# in a line " * Base: step NN" (the decode step is built on the portable step 07).
diff: check-step
	@base=$$(sed -n 's/^ \* Base: step \([0-9][0-9]\).*/\1/p' $(STEP_DIR)/kernel.c* | head -n 1); \
	prev=$$(if [ -n "$$base" ]; then ls -d steps/$${base}_*; else ls -d steps/*/ | sed 's:/$$::' | awk -v s="$(STEP_DIR)" '$$0==s{print p} {p=$$0}'; fi); \
	if [ -z "$$prev" ]; then echo "step $(step) is the first step: nothing to diff against"; exit 0; fi; \
	git --no-pager diff --no-index --stat $$prev/kernel.c* $(STEP_DIR)/kernel.c* ; \
	git --no-pager diff --no-index --color=auto $$prev/kernel.c* $(STEP_DIR)/kernel.c* || true

info: check-step
	@$(MAKE) -s $(BUILD)/step$(step)/fa2
	@bash tools/info.sh $(STEP_DIR) $(BUILD)/step$(step) "$(NVCC_OPTS) $(call step_gencode,$(step))"

profile: check-step
	@$(MAKE) -s $(BUILD)/step$(step)/fa2
	@KERNELS=$(or $(KERNELS),1) SKIP=$(or $(SKIP),0) bash tools/profile.sh $(BUILD)/step$(step)/fa2 $(ARGS)

sanitize: check-step
	@$(MAKE) -s $(BUILD)/step$(step)/fa2
	@bash tools/sanitize.sh $(BUILD)/step$(step)/fa2

# ---- harness ----
harness: $(BUILD)/common/main.o $(HARNESS_O)

$(BUILD)/common/%.o: common/%.c common/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

# the timing's L2 flush, a kernel (flush.cu)
$(BUILD)/common/%.o: common/%.cu common/*.h $(NVCC_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# ---- a variant of a step's kernel: the same flags, other -D defines or another source file ----
# (steps/07_tuned/sweep.sh builds its tile candidates this way, tests/mutants.sh its planted bugs)
NAME    ?=
DEFINES ?=
SRC     ?=
VARIANT_DIR = $(BUILD)/variants/$(NAME)
variant: check-step $(BUILD)/common/main.o $(HARNESS_O)
	@if [ -z "$(NAME)" ]; then echo "error: NAME='' (allowed: a folder name under $(BUILD)/variants)"; exit 2; fi
	@mkdir -p $(VARIANT_DIR)
	@echo $(step) > $(VARIANT_DIR)/step  # whose variant it is: tools/sanitize.sh reads it
	@$(NVCC) $(NVCC_OPTS) $(call step_gencode,$(step)) $(DEFINES) -Xptxas -v -c $(or $(SRC),$(wildcard $(STEP_DIR)/kernel.cu)) \
	  -o $(VARIANT_DIR)/kernel.o 2>$(VARIANT_DIR)/ptxas.txt || { cat $(VARIANT_DIR)/ptxas.txt; exit 1; }
	@$(NVCC) $(call step_gencode,$(step)) -Xcompiler -fopenmp $(VARIANT_DIR)/kernel.o $(BUILD)/common/main.o $(HARNESS_O) $(CUDA_LIBS) -o $(VARIANT_DIR)/fa2
	@$(NVCC) $(call step_gencode,$(step)) -shared $(VARIANT_DIR)/kernel.o $(STEP_LIB_O) $(CUDA_LIBS) -o $(VARIANT_DIR)/libfa2.so

# ---- steps: one kernel file each -> build/stepNN/{kernel.o,fa2,libfa2.so} ----
$(BUILD)/step00/kernel.o: $(wildcard steps/00_*/kernel.c) common/*.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/step00/fa2: $(BUILD)/step00/kernel.o $(BUILD)/common/main.o $(HARNESS_O)
	$(CC) -fopenmp $^ $(CUDA_LIBS) -o $@

$(BUILD)/step00/libfa2.so: $(BUILD)/step00/kernel.o $(BUILD)/common/validate.o
	$(CC) -shared -fopenmp $^ -lm -o $@

define GPU_STEP
$(BUILD)/step$(1)/kernel.o: $(wildcard steps/$(1)_*/kernel.cu) common/*.h $(if $(filter $(1),$(HOPPER_STEPS)),,$(NVCC_STAMP))
	@mkdir -p $$(dir $$@)
	$(NVCC) $(NVCC_OPTS) $(call step_gencode,$(1)) -c $$< -o $$@

$(BUILD)/step$(1)/fa2: $(BUILD)/step$(1)/kernel.o $(BUILD)/common/main.o $(HARNESS_O)
	$(NVCC) $(call step_gencode,$(1)) -Xcompiler -fopenmp $$^ $(CUDA_LIBS) -o $$@

$(BUILD)/step$(1)/libfa2.so: $(BUILD)/step$(1)/kernel.o $(STEP_LIB_O)
	$(NVCC) $(call step_gencode,$(1)) -shared $$^ $(CUDA_LIBS) -o $$@
endef
$(foreach i,$(GPU_IDS),$(eval $(call GPU_STEP,$(i))))

# ---- scratch: layout visualizers (make scratch [name=NAME ARGS="..."]) ----
include scratch/scratch.mk

# ---- peers: the unfused cuBLAS baseline and the mma.sync ceiling probe ----
include reference/reference.mk

# ---- the progression table and its plots ----
SHAPES ?= seed
ROUNDS ?= 3
STEPS ?=
BACKENDS ?=
.PHONY: compare plots figures
compare: all
	@ROUNDS=$(ROUNDS) STEPS="$(STEPS)" BACKENDS="$(BACKENDS)" bash reference/compare.sh $(SHAPES)

# matplotlib from the system if it imports, else from a local venv made once
PLOT_PYTHON := $(shell $(PYTHON) -c 'import matplotlib, numpy' >/dev/null 2>&1 && echo $(PYTHON) || echo .venv/bin/python)
CSV ?=
plots: $(filter .venv/bin/python,$(PLOT_PYTHON))
	$(PLOT_PYTHON) plots/progression.py $(CSV)

# the figures of docs/, drawn from the scratch programs' layouts (figures/make.py)
figures: $(filter .venv/bin/python,$(PLOT_PYTHON)) scratch-build
	$(PLOT_PYTHON) figures/make.py

.venv/bin/python:
	$(PYTHON) -m venv .venv && .venv/bin/pip install -q -r plots/requirements.txt

# ---- PyTorch: the steps as operators (python/fa2_ext.cpp into build/torch/, torch's cpp_extension) ----
.PHONY: torch
torch:
	$(PYTHON) python/fa2.py --build

# ---- tests ----
.PHONY: reference-programs
reference-programs: $(REFERENCE_TARGETS)

TEST_PROGRAMS := $(BUILD)/tests/test_cpu $(BUILD)/tests/test_paged $(BUILD)/tests/test_backward $(BUILD)/tests/test_checker $(BUILD)/tests/test_abi $(BUILD)/tests/test_limits $(BUILD)/tests/gpu_matrix
.PHONY: test-programs
test-programs: $(TEST_PROGRAMS)

$(BUILD)/tests/test_cpu: tests/test_cpu.c $(BUILD)/step00/kernel.o $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/step00/kernel.o $(HARNESS_O) $(CUDA_LIBS) -o $@

$(BUILD)/tests/test_paged: tests/test_paged.c $(BUILD)/step00/kernel.o $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/step00/kernel.o $(HARNESS_O) $(CUDA_LIBS) -o $@

$(BUILD)/tests/test_backward: tests/test_backward.c $(BUILD)/step00/kernel.o $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(BUILD)/step00/kernel.o $(HARNESS_O) $(CUDA_LIBS) -o $@

$(BUILD)/tests/test_checker: tests/test_checker.c $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(HARNESS_O) $(CUDA_LIBS) -o $@

$(BUILD)/tests/test_abi: tests/test_abi.c $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(HARNESS_O) $(CUDA_LIBS) -o $@

$(BUILD)/tests/test_limits: tests/test_limits.c $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(HARNESS_O) $(CUDA_LIBS) -o $@

$(BUILD)/tests/gpu_matrix: tests/gpu_matrix.c $(HARNESS_O) common/*.h tests/test_util.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(HARNESS_O) $(CUDA_LIBS) -o $@

test:
	@bash tests/run.sh

clean:
	rm -rf $(BUILD)
