/* The device scheduler's common ground (schedule_step_kernel.cuh): its block shape, shared
 * memory and the writers' shared pieces (the region's tail and header, an item's store,
 * division by row tiles), which the uniform writer (schedule_step_kernel.cuh) and equal shares'
 * (schedule_step_shares.cuh) both use. */
#ifndef MLAV_CUDA_SCHEDULE_STEP_COMMON_CUH
#define MLAV_CUDA_SCHEDULE_STEP_COMMON_CUH

#include "../common/fastdiv.h"
#include "../common/schedule_step.h"
#include "../common/schedule_step_shares.h"
#include "../common/shard.h"
#include "flash.h"

namespace {

constexpr int NTH = 512, NWARPS = NTH / 32;
constexpr int MAXB = MLAV_STEP_MAX_BATCH;
constexpr int MAX_SEARCHES = 1 + MLAV_STEP_MORE_WAVES, MAX_CANDS = 3 + MLAV_STEP_MORE_WAVES;
static_assert(MLAV_FLASH_MAX_SPLITS <= MLAV_STEP_INV_MAX, "1 / splits from the table alone");
static_assert(MAX_SEARCHES <= NWARPS, "a warp per search");
static_assert(sizeof(mlav_split_item) == 32 && sizeof(mlav_combine_item) == 32,
              "items stored as two int4");

/* The step's sums over its requests. */
struct sums {
    int64_t work;
    int64_t kv_tiles; /* KV tiles of the requests with rows (equal shares' sequence) */
    uint32_t tiles; /* below 2^31 when q_indptr is taken (max_tiles); else unused */
    int32_t max_kv, first_bad, flag;
    int32_t taken, min_mt, max_mt; /* requests with rows; their least and most row tiles */
};

constexpr int MAXP = MLAV_STEP_SHARES_MAX_PARTS;

/* Equal shares' arrays (schedule_step_shares.h), over the uniform writer's, which a step that
 * takes shares never uses: per request with rows (packed, in request order) and per part. */
struct shares_smem {
    int64_t first[MAXP + 1];  /* each packed request's first KV tile in the sequence; N last */
    int64_t start[MAXP];      /* a request that starts inside a part: when its piece starts */
    int32_t b[MAXP];          /* the request */
    int32_t count[MAXP];      /* its pieces (splits) */
    int32_t slot0[MAXP];      /* its first slot, -1 unsplit */
    int32_t part[MAXP];       /* the part it starts inside, -1 at a part's start */
    int32_t inside[MAXP];     /* per part: requests that start inside it */
    int32_t comb_req[MAXP];   /* the packed request of each split request, in order */
    int4 piece[2 * MAXP];     /* in dispatch order: request, kv_begin, kv_end, first slot */
};

/* In dynamic shared memory (63 KB at MLAV_STEP_MAX_BATCH, past the 48 KB of static), so that
 * the items read every per-request value from it: mlav_step_schedule_prepare raises the
 * kernel's limit. */
struct sched_smem {
    int32_t tiles[MAXB]; /* row tiles of each accepted request, 0 when skipped */
    uint32_t kv[MAXB];
    int32_t q0[MAXB + 1]; /* q_indptr, for the items */
    union {
        struct {
            int32_t blk[MAXB + 1], comb[MAXB + 1], slot[MAXB + 1]; /* exclusive prefix sums */
            uint32_t per[MAXB];    /* at the chosen chunk: the split length in ka units */
            uint16_t splits[MAXB]; /* at the chosen chunk: splits - 1 (after the recount) */
        };
        shares_smem sh;
    };
    /* equal shares' block-wide values */
    unsigned long long sh_time;
    int32_t sh_most, sh_later, sh_refused, sh_slots, sh_comb;
    double inv[MLAV_STEP_INV_MAX + 1];                      /* fl(1 / d), schedule_step.h */
    int64_t cost[MAX_CANDS];     /* the candidates' models: c0, 2 c0, 4 c0, then c_j of search j */
    int64_t found[MAX_SEARCHES]; /* each search's chunk c_j */
    sums warp_sums[NWARPS];
    int4 warp_tot[NWARPS]; /* a warp's blocks, combine items, slots, most splits */
    int64_t warp_tiles[NWARPS]; /* equal shares: a warp's KV tiles */
};

constexpr unsigned FULL = 0xffffffffu;

/* The step region's tail past the combine items, zero as in the host's staging slots (so that
 * both updates write the same region_bytes), and the header. */
__device__ void finish_region(const mlav_step_sched_params &p, int32_t bad, int32_t n_items,
                              int32_t n_comb, int32_t n_slots, int64_t chunk, int32_t most)
{
    const int tid = threadIdx.x;
    char *const region = reinterpret_cast<char *>(p.hdr);
    const size_t used = sizeof(mlav_step_header) +
                        sizeof(mlav_split_item) * (size_t)p.bd.max_items +
                        sizeof(mlav_combine_item) * (size_t)p.bd.max_combine;
#pragma unroll 1
    for (size_t i = used + tid; i < p.region_bytes; i += NTH)
        region[i] = 0;
    if (tid == 0) {
        mlav_step_header h = {};
        h.bad = bad;
        h.batch = p.batch;
        h.n_items = n_items;
        h.n_combine = n_comb;
        h.n_slots = n_slots;
        h.chunk_keys = (int32_t)chunk;
        mlav_step_combine_shape(n_comb, most, p.sp.rows_per_tile, &p.bd, &h);
        h.owner = p.owner;
        h.limits = p.lim;
        *p.hdr = h;
    }
}

/* Item (or combine item) i of an array of 32-byte items: two 16-byte stores, not eight of 4 (the
 * region is 256-byte aligned). */
__device__ __forceinline__ void put_item(void *items, int32_t i, int4 lo, int4 hi)
{
    int4 *const dst = reinterpret_cast<int4 *>(items) + 2 * (size_t)i;
    dst[0] = lo;
    dst[1] = hi;
}

/* k / mt for 0 <= k < 2^31: by the table where it has 1 / mt (schedule_step.h: exact for any
 * such k), a division past it. */
__device__ __forceinline__ int32_t div_mt(const sched_smem &s, int32_t k, int32_t mt)
{
    return mt <= MLAV_STEP_INV_MAX ? (int32_t)mlav_step_floor_div((double)k + 0.5, s.inv[mt])
                                   : k / mt;
}

} // namespace

#endif
