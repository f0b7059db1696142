#!/usr/bin/env python3
"""Two variants of step 08 for run 75, written to OUT_DIR (the step itself is unchanged).

 prefetch: thread 0 prefetches the three tensor maps (prefetch.tensormap) before its
           first copy: is the copy engine's first fetch of each descriptor on the path?
 spread:   the K and V boxes of a tile are issued by as many warps as there are boxes
           (lane 0 of warps 0..2D/64-1, one box each, each arriving with its own bytes):
           is the one issuing thread's extra work per tile, which the block-wide barrier
           makes every warp wait for, what costs step 08 time where an SM holds one block?
usage: python3 variants08.py OUT_DIR"""
import pathlib, sys

src = pathlib.Path("steps/08_tma_mbarrier/kernel.cu").read_text()
out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)


def edit(text, pairs, name):
    for old, new in pairs:
        if text.count(old) != 1:
            sys.exit(f"variant {name}: {old[:60]!r} found {text.count(old)} times")
        text = text.replace(old, new)
    return text.replace('"08_tma_mbarrier"', f'"08_variant_{name}"')


prefetch = edit(src, [(
    "        mbarrier_init(q_full, 1);  // one arrival",
    '        asm volatile("prefetch.tensormap [%0];" ::"l"(&q_map) : "memory");\n'
    '        asm volatile("prefetch.tensormap [%0];" ::"l"(&k_map) : "memory");\n'
    '        asm volatile("prefetch.tensormap [%0];" ::"l"(&v_map) : "memory");\n'
    "        mbarrier_init(q_full, 1);  // one arrival")], "prefetch")

spread = edit(src, [
    ("""    auto load_kv = [&](const int nb) {
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES, bar = kv_full + nb % STAGES * 8;
        mbarrier_arrive_expect_tx(bar, 2 * STAGE_BYTES);
        tma_load_tile<BLOCK_N, D>(k_saddr + stage_off, &k_map, bar, nb * BLOCK_N, h_kv, b);
        tma_load_tile<BLOCK_N, D>(v_saddr + stage_off, &v_map, bar, nb * BLOCK_N, h_kv, b);
    };""",
     """    constexpr int BOXES = 2 * D / SLAB_COLS;  // K's slabs, then V's
    static_assert(BOXES <= C::WARPS, "one issuing warp per box");
    auto load_kv = [&](const int nb) {  // lane 0 of warp w < BOXES: box w of tile nb
        const uint32_t stage_off = nb % STAGES * STAGE_BYTES, bar = kv_full + nb % STAGES * 8;
        const int slab = warp % (D / SLAB_COLS);
        mbarrier_arrive_expect_tx(bar, L::KV_SLAB_BYTES);
        tma_load(warp < D / SLAB_COLS ? k_saddr + stage_off + slab * L::KV_SLAB_BYTES : v_saddr + stage_off + slab * L::KV_SLAB_BYTES,
                 warp < D / SLAB_COLS ? &k_map : &v_map, bar, slab * SLAB_COLS, nb * BLOCK_N, h_kv, b);
    };"""),
    ("""        for (int s = 0; s < STAGES; s++) mbarrier_init(kv_full + s * 8, 1);""",
     """        for (int s = 0; s < STAGES; s++) mbarrier_init(kv_full + s * 8, BOXES);"""),
    ("""        if (n_blocks > 0) load_kv(0);
    }
    __syncthreads();  // the barriers are initialised before anyone waits on them
""", """    }
    __syncthreads();  // the barriers are initialised before anyone waits on them
    if (lane == 0 && warp < BOXES && n_blocks > 0) load_kv(0);
"""),
    ("""        if (threadIdx.x == 0 && nb + 1 < n_blocks) load_kv(nb + 1);""",
     """        if (lane == 0 && warp < BOXES && nb + 1 < n_blocks) load_kv(nb + 1);"""),
], "spread")

(out / "prefetch.cu").write_text(prefetch)
(out / "spread.cu").write_text(spread)
