# reference/shapes.sh - the shapes `make compare` runs, sourced by compare.sh and readme_table.sh.
# Each entry: batch heads_q heads_kv seqlen head_dim causal (seqlen_q = seqlen_k: torch's
# is_causal is top-left, the same mask as FA2's bottom-right only for equal seqlens).
# shellcheck shell=bash disable=SC2034

SEED_SHAPE="2 8 8 1024 128 0"

# SHAPES=all: the benchmark shapes (reference/sdpa.py --shapes all holds the same list) ...
BENCH_SHAPES=("$SEED_SHAPE" "4 16 16 4096 128 0" "4 16 16 4096 128 1" "4 16 16 4096 64 0" "16 16 16 1024 64 0")
# ... and a seqlen sweep at a constant batch * seqlen = 16384 tokens, H = 16, d = 128, non-causal
# (the FlashAttention-2 paper's setting): the GPU always gets the same number of query rows,
# so the curve shows what the sequence length alone does to throughput.
SWEEP_SHAPES=("32 16 16 512 128 0" "16 16 16 1024 128 0" "8 16 16 2048 128 0" "4 16 16 4096 128 0"
              "2 16 16 8192 128 0" "1 16 16 16384 128 0")
