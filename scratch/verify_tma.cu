/* verify_tma - asks the copy engine where TMA's 128-byte swizzle puts each element of
 * a tile, and compares it with tma_byte_offset in layouts.h: step 03's swizzle of a
 * 64-column tile, one slab after another (the layout step 08's ldmatrix addresses read).
 *
 * A [rows][D] tensor of 16-bit elements, each holding its own index row * D + col, is
 * copied into shared memory by cp.async.bulk.tensor through a tensor map made as step 08
 * makes its own (CU_TENSOR_MAP_SWIZZLE_128B, boxes of [rows][64]), the copy completed on
 * an mbarrier; the block then writes its shared memory out, byte for byte. Every element
 * must sit where tma_byte_offset says. Prints the map the GPU produced, logical 16-byte
 * chunk -> slab.physical chunk, for the first rows.
 *
 * One PASS/FAIL line per property, exit 1 on any failure; without a GPU of compute
 * capability 9.0 or newer, one SKIP line and exit 0. */
#include "tool.h"
#include "layouts.h"

#include <cuda.h>          // CUtensorMap and its enums (types only: nothing links libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled, fetched at run time from the driver
#include <cuda_runtime.h>
#include <stdint.h>

static const char usage[] =
    "usage: verify_tma [--dim 64|128] [--rows N]\n"
    "Copies a [rows][D] tile of position-encoded 16-bit elements into shared memory with TMA\n"
    "(128-byte swizzle, 64-column boxes) and checks every element against tma_byte_offset in\n"
    "scratch/layouts.h; prints the placement the GPU produced for the first 8 rows.\n"
    "  --dim   head dimension D (default 128: two slabs)\n"
    "  --rows  rows of the tile, 8 to 256 in steps of 8 (default 64)\n"
    "Without a GPU of compute capability 9.0 or newer it prints one SKIP line, exit 0.\n";

#define VERIFIER "verify_tma" /* CUDA_OK's FAIL lines (scratch/tool.h) */

/* ---- device side: the raw instructions, nothing derived from layouts.h ---- */

// The copy's smem destination must be 1024-byte aligned for the 128-byte swizzle.
enum { SWIZZLE_ATOM = 1024, SLAB_ELEMS = 64, SLAB_ROW_BYTES = 128 };

__global__ void tma_copy(const __grid_constant__ CUtensorMap map, uint16_t *out, int rows, int dim)
{
    extern __shared__ __align__(16) uint16_t smem[];
    const uint32_t smem_saddr = (uint32_t)__cvta_generic_to_shared(smem);
    const uint32_t pad = (SWIZZLE_ATOM - smem_saddr % SWIZZLE_ATOM) % SWIZZLE_ATOM;
    const uint32_t tile = smem_saddr + pad, tile_bytes = rows * dim * 2, bar = tile + tile_bytes;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar));
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(tile_bytes) : "memory");
        for (int slab = 0; slab < dim / SLAB_ELEMS; slab++)
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n"
                         ::"r"(tile + slab * rows * SLAB_ROW_BYTES), "l"(&map), "r"(bar), "r"(slab * SLAB_ELEMS), "r"(0)
                         : "memory");
    }
    __syncthreads();
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar)
                     : "memory");
    for (int i = threadIdx.x; i < rows * dim; i += blockDim.x) out[i] = smem[pad / 2 + i];
}

/* ---- host side ---- */

static PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder(void)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
        return NULL;
    return (PFN_cuTensorMapEncodeTiled_v12000)fn;
}

typedef struct {
    int rows, dim;
    const uint16_t *smem;  // the tile as the GPU left it in shared memory
} observed_tile;

// Where element (row, chunk * 8) of the tensor landed: "slab.chunk" of the shared tile.
static void landed_cell(int row, int chunk, const void *ctx, grid_cell *cell)
{
    const observed_tile *t = (const observed_tile *)ctx;
    const int want = row * t->dim + chunk * CHUNK_ELEMS;
    for (int i = 0; i < t->rows * t->dim; i++)
        if (t->smem[i] == want) {
            const int byte = i * ELEM_BYTES, slab = byte / (t->rows * TMA_SLAB_ROW_BYTES);
            const int physical = byte % TMA_SLAB_ROW_BYTES / CHUNK_BYTES;
            snprintf(cell->text, sizeof cell->text, "%d.%d", slab, physical);
            cell->colour = physical;
            return;
        }
    snprintf(cell->text, sizeof cell->text, "?");
}

int main(int argc, char **argv)
{
    int dim = 128, rows = 64;
    const cli_option opts[] = {
        {"--dim", &dim, 64, 128, 64, NULL},
        {"--rows", &rows, 8, 256, 8, NULL},
    };
    parse_cli(argc, argv, usage, opts, 2, NULL);
    int devices = 0, major = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess || major < 9) {
        printf("SKIP verify_tma: no usable GPU (TMA needs compute capability 9.0 or newer)\n");
        return 0;
    }
    PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode) {
        printf("FAIL verify_tma: the driver has no cuTensorMapEncodeTiled (older than CUDA 12)\n");
        return 1;
    }
    const size_t elems = (size_t)rows * dim;
    uint16_t *host = (uint16_t *)malloc(elems * 2), *back = (uint16_t *)malloc(elems * 2);
    for (size_t i = 0; i < elems; i++) host[i] = (uint16_t)i;  // element (row, col) holds row * D + col
    uint16_t *src, *out;
    CUDA_OK(cudaMalloc(&src, elems * 2));
    CUDA_OK(cudaMalloc(&out, elems * 2));
    CUDA_OK(cudaMemcpy(src, host, elems * 2, cudaMemcpyHostToDevice));

    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)dim, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)dim * 2};
    const cuuint32_t box[2] = {SLAB_ELEMS, (cuuint32_t)rows}, element_strides[2] = {1, 1};
    const CUresult made = encode(&map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, src, dims, strides, box, element_strides,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (made != CUDA_SUCCESS) {
        printf("FAIL verify_tma: cuTensorMapEncodeTiled returned %d\n", (int)made);
        return 1;
    }
    const int smem_bytes = (int)elems * 2 + 8 + SWIZZLE_ATOM;
    CUDA_OK(cudaFuncSetAttribute(tma_copy, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    tma_copy<<<1, 128, smem_bytes>>>(map, out, rows, dim);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(back, out, elems * 2, cudaMemcpyDeviceToHost));

    int misplaced = 0, first_row = -1, first_col = -1;
    for (int row = 0; row < rows; row++)
        for (int col = 0; col < dim; col++)
            if (back[tma_byte_offset(row, col, rows) / ELEM_BYTES] != row * dim + col && misplaced++ == 0)
                first_row = row, first_col = col;
    char name[160];
    snprintf(name, sizeof name,
             "verify_tma [%d][%d], 128-byte swizzle: every element where tma_byte_offset puts it "
             "(slab col / 64, then step 03's chunk ^ (row %% 8) on 128-byte rows)", rows, dim);
    check(!misplaced, name, "%d of %zu elements elsewhere, the first (row %d, col %d)", misplaced, elems, first_row, first_col);

    printf("\nwhere the copy engine put element (row, 8 * chunk): slab.physical chunk (16 bytes each)\n");
    const observed_tile seen = {rows, dim, back};
    grid_shape shape = {"r\\ch", rows < 8 ? rows : 8, dim / CHUNK_ELEMS, 4, TMA_SLAB_ROW_BYTES / CHUNK_BYTES, 0};
    print_grid(&shape, landed_cell, &seen);
    free(host);
    free(back);
    cudaFree(src);
    cudaFree(out);
    return check_exit_code();
}
