/* The fast CPU backend: OpenMP over (request, row block, KV split) work items, OpenBLAS sgemm on
 * gathered fp32 KV tiles (an FP8 cache dequantized as it is gathered), online softmax across
 * tiles, and an LSE merge of the splits. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../common/dtype.h"
#include "../common/merge.h"
#include "../common/visibility.h"
#include "../dispatch/backend.h"
#include "oracle.h"
#include "verify_blas.h"

/* Tuning constants (compile-time, as STYLE.md asks; -D overrides them for tuning runs).
 * Measured on a 2-core Zen 5 with OpenBLAS 0.3.21's Haswell kernels: 128, 256 and 512-key
 * tiles and 1, 2 or 4 waves were within noise of each other at the reference shape; 256 keys
 * keep both GEMMs (M x 256 x 576 and M x 512 x 256) at the single-core sgemm rate while a
 * gathered tile (576 KiB fp32) stays in L2. */
#ifndef CPU_TILE
#define CPU_TILE 256            /* KV rows gathered, widened and multiplied at once */
#endif
#ifndef CPU_WAVES
#define CPU_WAVES 2             /* work items per thread the scheduler aims for (load balance) */
#endif
#define CPU_MAX_ROWS 1024       /* most folded (token, head) rows of one work item */
#define CPU_MIN_ROWS 64         /* fewest rows worth a row block of their own (GEMM efficiency) */
#define CPU_BLOCK_FLOATS 589824 /* rows x W (and tile x W) cap: 2.25 MiB, so wide rows get
                                   fewer rows per block and scratch stays bounded for any dims */
#define CPU_MIN_SPLIT_TILES 2   /* fewest tiles worth a KV split (amortises Q widening, merge) */
#define CPU_MAX_SPLITS 256      /* most splits of one row block: bounds partials and the merge */
#define CPU_ROW_OVERHEAD 16     /* per-row cost of an item (widen Q, finish, merge) in keys */
#define CPU_ALIGN 16            /* floats: every scratch buffer starts on a 64-byte line */
/* Tiles whose fp32 output and row sums are summed before they are folded into the fp64 running
 * state: fp32 running sums over a whole split lost accuracy with its length (rel-L2 3.3e-5 at
 * kv_len 2^26, 1.3e-2 at 2^31 - 1), while 16 tiles (4096 keys) of fp32 sums stay at fp32
 * rounding and the fold costs one pass over the row block's output per 16 tiles. */
#ifndef CPU_FOLD_TILES
#define CPU_FOLD_TILES 16
#endif

/* One work item: rows [r0, r0 + rows) of request b's folded rows (row r = token r / H, head
 * r % H: contiguous in q and out) against KV rows [k0, k1). */
typedef struct cpu_item {
    int32_t b;      /* request */
    int32_t rows;   /* <= cpu_sched.rows_max */
    int64_t r0;     /* first folded row (H x q_len can pass 2^31) */
    int32_t split;  /* index in its group; -1 when the item covers all KV and writes out itself */
    int32_t group;  /* index into the schedule's groups when split >= 0 */
    int64_t k0, k1; /* KV rows */
    double cost;    /* rows x keys, for largest-first ordering */
} cpu_item;

/* A row block whose KV is split: its partial states are merged after every item has run. */
typedef struct cpu_group {
    int32_t b, rows, nsplit;
    int32_t pad;  /* zero: the schedule's sum reads every byte */
    int64_t r0;
    size_t part; /* float offset of its partials: nsplit x [rows, Dl] outs, then nsplit x [rows]
                    lses */
} cpu_group;

/* What every schedule of a plan fits in: its work list's capacity, the scratch's tile and rows,
 * the partial states' floats. A plan for one problem's are its one schedule's; a plan for
 * limits' hold for any step within the limits (cpu_bounds_of). */
typedef struct cpu_bounds {
    int32_t max_items, max_groups;
    int32_t tile, rows;
    size_t part_floats;
} cpu_bounds;

/* One step's schedule: this header, then items [bounds.max_items] and groups
 * [bounds.max_groups]. A plan for one problem keeps it (made at plan time); a plan for limits
 * writes it into the workspace at each update, where the caller may write over it, so a run
 * checks it (sched_check) before it follows an index or an offset. */
typedef struct cpu_sched {
    int32_t n_items, n_groups;
    int32_t tile;         /* keys per tile (CPU_TILE, less for short steps or wide rows) */
    int32_t rows_max;     /* most rows of any item */
    size_t part_floats;   /* floats of all partial states */
    uint64_t sum;         /* of the lengths and work list it was made for (sched_sum) */
} cpu_sched;
#define CPU_SCHED_HDR 64  /* bytes of the header: the items start on a line */

typedef struct cpu_state {
    int nthreads;         /* omp_get_max_threads() at plan time: the scratch slots */
    cpu_bounds bd;
    size_t sched_bytes;   /* the workspace's schedule region (plans for limits), else 0 */
    size_t thread_floats; /* scratch floats per thread slot (for the bounds' tile and rows) */
    cpu_sched *one;       /* a plan for one problem: its schedule; NULL for limits */
} cpu_state;

/* Plans made and schedules built, for the tests (mlav_cpu_plan_counts): a run makes neither. */
static atomic_long plans_made, schedules_built;

void mlav_cpu_plan_counts(long *plans, long *schedules)
{
    *plans = atomic_load(&plans_made);
    *schedules = atomic_load(&schedules_built);
}

static cpu_item *sched_items(const cpu_sched *sc)
{
    return (cpu_item *)(void *)((char *)sc + CPU_SCHED_HDR);
}

static cpu_group *sched_groups(const cpu_sched *sc, const cpu_bounds *bd)
{
    return (cpu_group *)(void *)(sched_items(sc) + bd->max_items);
}

static size_t sched_bytes_of(const cpu_bounds *bd)
{
    return CPU_SCHED_HDR + sizeof(cpu_item) * (size_t)bd->max_items +
           sizeof(cpu_group) * (size_t)bd->max_groups;
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t clamp64(int64_t x, int64_t lo, int64_t hi)
{
    return x < lo ? lo : (x > hi ? hi : x);
}

/* Per-thread scratch (floats, each piece line-aligned). */
typedef struct cpu_scratch {
    float *qf; /* [rows_max, W] Q widened to fp32 (absent for F32 problems of a 16/32-bit cache:
                  q is used in place; an FP8 cache's may scale it, see fp8_q_shift) */
    float *kt; /* [tile, W] gathered KV tile */
    float *s;  /* [rows_max, tile] scores, then probabilities */
    float *o;  /* [rows_max, Dl] unnormalised output of the tiles since the last fold */
    float *m;  /* [rows_max] running max */
    float *l;  /* [rows_max] row sums of the tiles since the last fold */
    double *od; /* [rows_max, Dl] running unnormalised output, fp64 (the folds of o) */
    double *ld; /* [rows_max] running row sum, fp64 (the folds of l) */
} cpu_scratch;

/* Carve one thread's scratch out of `base` (NULL: only count). Returns its size in floats. */
static size_t scratch_layout(const mlav_problem_info *p, int32_t rows, int32_t tile,
                             float *base, cpu_scratch *sc)
{
    /* in floats; the two fp64 pieces take two floats per double (and stay 64-byte aligned) */
    const int q_in_place = p->dtype == MLAV_DTYPE_F32 && p->kv_dtype != MLAV_DTYPE_FP8_E4M3;
    const size_t sizes[8] = {q_in_place ? 0 : (size_t)rows * (size_t)p->W,
                             (size_t)tile * (size_t)p->W,
                             (size_t)rows * (size_t)tile,
                             (size_t)rows * (size_t)p->Dl,
                             (size_t)rows,
                             (size_t)rows,
                             2 * (size_t)rows * (size_t)p->Dl,
                             2 * (size_t)rows};
    float *ptr[8];
    size_t off = 0;
    for (int k = 0; k < 8; k++) {
        ptr[k] = base ? base + off : NULL;
        off += round_up(sizes[k], CPU_ALIGN);
    }
    if (sc)
        *sc = (cpu_scratch){.qf = ptr[0], .kt = ptr[1], .s = ptr[2], .o = ptr[3], .m = ptr[4],
                            .l = ptr[5], .od = (double *)(void *)ptr[6],
                            .ld = (double *)(void *)ptr[7]};
    return off;
}

static int cmp_items(const cpu_item *x, const cpu_item *y)
{
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    /* ties in a fixed order, so the plan is a pure function of the problem and thread count */
    if (x->b != y->b)
        return x->b < y->b ? -1 : 1;
    if (x->r0 != y->r0)
        return x->r0 < y->r0 ? -1 : 1;
    return x->k0 < y->k0 ? -1 : (x->k0 > y->k0);
}

/* Largest first, by cmp_items (a total order: no two items share b, r0 and k0). A heap sort:
 * in place and allocation-free, as an update must be. */
static void sift_down(cpu_item *a, int64_t root, int64_t n)
{
    for (;;) {
        int64_t child = 2 * root + 1;
        if (child >= n)
            return;
        /* the heap keeps the item that sorts last on top */
        if (child + 1 < n && cmp_items(&a[child], &a[child + 1]) < 0)
            child++;
        if (cmp_items(&a[root], &a[child]) >= 0)
            return;
        const cpu_item t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

static void sort_items(cpu_item *a, int64_t n)
{
    for (int64_t k = n / 2 - 1; k >= 0; k--)
        sift_down(a, k, n);
    for (int64_t end = n - 1; end > 0; end--) {
        const cpu_item t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift_down(a, 0, end);
    }
}

/* The scheduler: a pure function of the problem's shape and lengths and the thread count.
 *
 * Every request with q_len > 0 has M = H x q_len folded rows and kv_len keys, and costs
 * M x (kv_len + CPU_ROW_OVERHEAD). With `total` the sum over requests, a work item should cost
 * about chunk = total / (threads x CPU_WAVES), so the dynamic loop has a few items per thread to
 * balance. A request wanting `want = ceil(cost / chunk)` items gets them first by splitting its
 * KV into pieces of at least CPU_MIN_SPLIT_TILES tiles (one long request fills every core), and
 * only where the KV is too short for that, by cutting its rows into more blocks of at least
 * CPU_MIN_ROWS rows (many heads, short context). Row blocks never exceed `max_rows`, which
 * bounds the scratch. Blocks and splits are balanced (sizes differ by at most one row or one
 * tile). With one thread nothing is split: splits would only add work. */

static int64_t sched_max_rows(int64_t W)
{
    return clamp64(CPU_BLOCK_FLOATS / W, CPU_MIN_ROWS, CPU_MAX_ROWS);
}

/* Keys per tile for problems whose longest kv_len is `max_kv`: CPU_TILE, fewer for wide rows,
 * and for short problems a smaller tile, so that the scratch shrinks too. */
static int64_t sched_tile(int64_t W, int64_t max_kv)
{
    const int64_t tile = clamp64(CPU_BLOCK_FLOATS / W, 16, CPU_TILE);
    if (max_kv < tile)
        return (int64_t)round_up((size_t)(max_kv > 0 ? max_kv : 1), 16);
    return tile;
}

/* What one walk of the scheduler counted (and, filling, wrote). */
typedef struct sched_walk {
    int64_t n_items, n_groups, rows_max;
    size_t part;
} sched_walk;

/* One walk over the requests: counts only when `items` is NULL, else fills items and groups. */
static void schedule_walk(const mlav_problem_info *p, int nthreads, int64_t tile,
                          cpu_item *items, cpu_group *groups, sched_walk *w)
{
    const int64_t H = p->H, max_rows = sched_max_rows(p->W);
    double total = 0.0;
    for (int32_t b = 0; b < p->B; b++) {
        int32_t q_len = mlav_info_q_len(p, b);
        if (q_len > 0)
            total += (double)H * q_len *
                     ((double)mlav_shard_rows(p->shard, p->kv_lens[b]) + CPU_ROW_OVERHEAD);
    }
    const double chunk = total / ((double)nthreads * CPU_WAVES);
    *w = (sched_walk){.rows_max = 1};
    for (int32_t b = 0; b < p->B; b++) {
        int32_t q_len = mlav_info_q_len(p, b);
        if (q_len == 0)
            continue; /* no output rows */
        /* the rows the rank reads (every row when not sharded) */
        const int64_t M = H * q_len, kv = mlav_shard_rows(p->shard, p->kv_lens[b]);
        const int64_t ntiles = ceil_div(kv, tile);
        const double cost = (double)M * ((double)kv + CPU_ROW_OVERHEAD);
        int64_t want = 1;
        if (nthreads > 1)
            want = (int64_t)fmin(ceil(cost / chunk), (double)INT32_MAX);
        const int64_t kv_parts = clamp64(ntiles / CPU_MIN_SPLIT_TILES, 1, CPU_MAX_SPLITS);
        const int64_t min_blk = ceil_div(M, max_rows);
        int64_t nblk = min_blk;
        if (want > kv_parts * nblk) { /* KV too short to split enough: cut the rows too */
            const int64_t most = ceil_div(M, CPU_MIN_ROWS);
            nblk = clamp64(ceil_div(want, kv_parts), min_blk, most > min_blk ? most : min_blk);
        }
        const int64_t nsplit = clamp64(ceil_div(want, nblk), 1, kv_parts);
        const int64_t base_rows = M / nblk, extra_rows = M % nblk;
        for (int64_t blk = 0; blk < nblk; blk++) {
            /* the first M % nblk blocks get one row more */
            const int64_t r0 = blk * base_rows + (blk < extra_rows ? blk : extra_rows);
            const int64_t rows = base_rows + (blk < extra_rows ? 1 : 0);
            if (rows > w->rows_max)
                w->rows_max = rows;
            if (items && nsplit > 1)
                groups[w->n_groups] = (cpu_group){.b = b,
                                                  .rows = (int32_t)rows,
                                                  .nsplit = (int32_t)nsplit,
                                                  .r0 = r0,
                                                  .part = w->part};
            for (int64_t s = 0; s < nsplit; s++) {
                if (items) {
                    const int64_t k0 = ntiles * s / nsplit * tile;
                    const int64_t t1 = ntiles * (s + 1) / nsplit;
                    const int64_t k1 = t1 * tile < kv ? t1 * tile : kv;
                    items[w->n_items] = (cpu_item){
                        .b = b,
                        .rows = (int32_t)rows,
                        .r0 = r0,
                        .split = nsplit > 1 ? (int32_t)s : -1,
                        .group = nsplit > 1 ? (int32_t)w->n_groups : -1,
                        .k0 = k0,
                        .k1 = k1,
                        .cost = (double)rows * ((double)(k1 - k0) + CPU_ROW_OVERHEAD),
                    };
                }
                w->n_items++;
            }
            if (nsplit > 1) {
                w->part += (size_t)nsplit * (size_t)rows * ((size_t)p->Dl + 1);
                w->part = round_up(w->part, CPU_ALIGN);
                w->n_groups++;
            }
        }
    }
}

/* FNV-1a over bytes, continuing from `h`. */
static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t k = 0; k < n; k++)
        h = (h ^ c[k]) * 0x100000001b3ull;
    return h;
}

/* The sum a schedule carries: of the step's lengths and its header and work list, so that a run
 * on a workspace written over since its update is refused rather than followed. */
static uint64_t sched_sum(const mlav_problem_info *p, const cpu_sched *sc, const cpu_bounds *bd)
{
    uint64_t h = fnv(0xcbf29ce484222325ull, &p->B, sizeof p->B);
    h = fnv(h, p->q_indptr, sizeof(int32_t) * ((size_t)p->B + 1));
    h = fnv(h, p->kv_lens, sizeof(int32_t) * (size_t)p->B);
    h = fnv(h, sc, offsetof(cpu_sched, sum));
    h = fnv(h, sched_items(sc), sizeof(cpu_item) * (size_t)sc->n_items);
    return fnv(h, sched_groups(sc, bd), sizeof(cpu_group) * (size_t)sc->n_groups);
}

/* The schedule of a step (`p` with its lengths) into `sc`, whose work list holds `bd`'s
 * capacity: what a plan for one problem does once and a plan for limits at each update.
 * Allocates nothing. */
static mlav_status schedule_into(const mlav_problem_info *p, int nthreads, const cpu_bounds *bd,
                                 cpu_sched *sc)
{
    atomic_fetch_add(&schedules_built, 1);
    const int64_t tile = sched_tile(p->W, p->max_kv_len);
    sched_walk w;
    schedule_walk(p, nthreads, tile, NULL, NULL, &w);
    if (w.n_items > bd->max_items || w.n_groups > bd->max_groups || tile > bd->tile ||
        w.rows_max > bd->rows || w.part > bd->part_floats)
        return mlav_set_error(MLAV_ERR_INTERNAL,
                              "a cpu schedule of %lld items, %lld groups, tile %lld, %lld rows "
                              "and %zu partial floats passes its plan's bounds (%d, %d, %d, %d, "
                              "%zu)",
                              (long long)w.n_items, (long long)w.n_groups, (long long)tile,
                              (long long)w.rows_max, w.part, bd->max_items, bd->max_groups,
                              bd->tile, bd->rows, bd->part_floats);
    memset(sc, 0, CPU_SCHED_HDR);
    schedule_walk(p, nthreads, tile, sched_items(sc), sched_groups(sc, bd), &w);
    sort_items(sched_items(sc), w.n_items);
    sc->n_items = (int32_t)w.n_items;
    sc->n_groups = (int32_t)w.n_groups;
    sc->tile = (int32_t)tile;
    sc->rows_max = (int32_t)w.rows_max;
    sc->part_floats = w.part;
    sc->sum = sched_sum(p, sc, bd);
    return MLAV_OK;
}

/* What any step within the limits can need (plans for limits; the shape's dims). From the rule
 * above: a request's items are nblk x nsplit <= 2 want + min_blk, with want <= cost / chunk + 1,
 * and the costs' shares of chunk sum to threads x CPU_WAVES; its split groups' partial rows
 * nsplit x M <= want x M < 2 M cost / chunk (a split request wants at least 2), so at most
 * 2 x threads x CPU_WAVES x the longest request's rows over the step, and at most 256 x its
 * rows. One more of each covers the rounding of the doubles. */
static cpu_bounds cpu_bounds_of(const mlav_problem_info *shape, const mlav_limits *lim,
                                int nthreads)
{
    const int64_t H = shape->H, max_rows = sched_max_rows(shape->W);
    const int64_t waves = (int64_t)nthreads * CPU_WAVES + 1;
    const int64_t rows_all = (int64_t)lim->max_tokens * H, rows_one = (int64_t)lim->max_q_len * H;
    const int64_t items = 2 * (waves + lim->max_batch) + lim->max_batch + rows_all / max_rows + 1;
    int64_t part_rows = 2 * waves * rows_one;
    if (part_rows > (int64_t)CPU_MAX_SPLITS * rows_all)
        part_rows = (int64_t)CPU_MAX_SPLITS * rows_all;
    if (nthreads == 1)
        part_rows = 0; /* one thread splits nothing */
    cpu_bounds bd;
    bd.max_items = (int32_t)(items < INT32_MAX ? items : INT32_MAX);
    bd.max_groups = bd.max_items;
    /* the tile of a step whose longest kv_len is at most the limits' (sched_tile) */
    const int64_t base = clamp64(CPU_BLOCK_FLOATS / shape->W, 16, CPU_TILE);
    bd.tile = (int32_t)round_up((size_t)(lim->max_kv_len < base ? lim->max_kv_len : base), 16);
    bd.rows = (int32_t)(rows_one < max_rows ? rows_one : max_rows);
    bd.part_floats = (size_t)part_rows * ((size_t)shape->Dl + 1) +
                     (size_t)CPU_ALIGN * (size_t)bd.max_groups;
    return bd;
}

static void cpu_free(void *state)
{
    cpu_state *st = state;
    if (!st)
        return;
    free(st->one);
    free(st);
}

static mlav_status cpu_available(void)
{
    return MLAV_OK;
}

static mlav_status cpu_plan(const mlav_problem_info *p, const mlav_limits *lim, uint64_t owner,
                            void **state, size_t *workspace_bytes)
{
    (void)owner; /* dispatch stamps a host workspace's step */
    atomic_fetch_add(&plans_made, 1);
    cpu_state *st = calloc(1, sizeof *st);
    if (!st)
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory for a CPU plan");
    *state = st;
    st->nthreads = omp_get_max_threads() > 1 ? omp_get_max_threads() : 1;
    if (mlav_info_has_lengths(p)) {
        /* one problem: its update now, into a schedule of exactly its size */
        sched_walk w;
        schedule_walk(p, st->nthreads, sched_tile(p->W, p->max_kv_len), NULL, NULL, &w);
        if (w.n_items > INT32_MAX || w.n_groups > INT32_MAX)
            return mlav_set_error(MLAV_ERR_UNSUPPORTED, "%lld CPU work items are too many",
                                  (long long)w.n_items);
        st->bd = (cpu_bounds){.max_items = (int32_t)w.n_items,
                              .max_groups = (int32_t)w.n_groups,
                              .tile = (int32_t)sched_tile(p->W, p->max_kv_len),
                              .rows = (int32_t)w.rows_max,
                              .part_floats = w.part};
        st->one = malloc(sched_bytes_of(&st->bd));
        if (!st->one)
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                                  "out of host memory for the CPU schedule");
        mlav_status s = schedule_into(p, st->nthreads, &st->bd, st->one);
        if (s != MLAV_OK)
            return s;
        st->thread_floats = scratch_layout(p, st->bd.rows, st->bd.tile, NULL, NULL);
        *workspace_bytes =
            st->one->n_items
                ? sizeof(float) * ((size_t)st->nthreads * st->thread_floats + st->bd.part_floats)
                : 0;
        return MLAV_OK;
    }
    st->bd = cpu_bounds_of(p, lim, st->nthreads);
    st->sched_bytes = round_up(sched_bytes_of(&st->bd), 256);
    st->thread_floats = scratch_layout(p, st->bd.rows, st->bd.tile, NULL, NULL);
    *workspace_bytes =
        st->sched_bytes +
        sizeof(float) * ((size_t)st->nthreads * st->thread_floats + st->bd.part_floats);
    return MLAV_OK;
}

/* A plan for limits' update: the step's schedule into the workspace (after dispatch's step
 * region, which holds the lengths `len` point at). */
static mlav_status cpu_update(const mlav_problem_info *shape, const void *state,
                              const mlav_lengths *len, void *workspace, size_t workspace_bytes,
                              void *stream)
{
    (void)stream;
    const cpu_state *st = state;
    if (st->one || workspace_bytes < st->sched_bytes)
        return mlav_set_error(MLAV_ERR_INTERNAL, "a cpu update on a plan for one problem or "
                                                 "a short workspace");
    mlav_problem_info step;
    mlav_step_info(shape, len->batch, len->q_indptr, len->kv_lens, &step);
    return schedule_into(&step, st->nthreads, &st->bd, workspace);
}

/* A workspace's schedule, checked against the step `p` and the plan's bounds before a run
 * follows it: every count, index, row range, key range and partial-state offset inside what the
 * plan sized, and its sum that of the step it was made for. */
static mlav_status sched_check(const mlav_problem_info *p, const cpu_state *st,
                               const cpu_sched *sc)
{
    const cpu_bounds *bd = &st->bd;
    int ok = sc->n_items >= 0 && sc->n_items <= bd->max_items && sc->n_groups >= 0 &&
             sc->n_groups <= bd->max_groups && sc->tile >= 1 && sc->tile <= bd->tile &&
             sc->rows_max >= 1 && sc->rows_max <= bd->rows && sc->part_floats <= bd->part_floats;
    const cpu_group *groups = ok ? sched_groups(sc, bd) : NULL;
    for (int32_t g = 0; ok && g < sc->n_groups; g++) {
        const cpu_group *gr = &groups[g];
        ok = gr->b >= 0 && gr->b < p->B && gr->nsplit >= 2 && gr->nsplit <= CPU_MAX_SPLITS &&
             gr->rows >= 1 && gr->rows <= sc->rows_max && gr->r0 >= 0 &&
             gr->r0 + gr->rows <= (int64_t)p->H * mlav_info_q_len(p, gr->b) &&
             gr->part <= sc->part_floats &&
             (size_t)gr->nsplit * (size_t)gr->rows * ((size_t)p->Dl + 1) <=
                 sc->part_floats - gr->part;
    }
    const cpu_item *items = ok ? sched_items(sc) : NULL;
    for (int32_t k = 0; ok && k < sc->n_items; k++) {
        const cpu_item *it = &items[k];
        ok = it->b >= 0 && it->b < p->B && it->rows >= 1 && it->rows <= sc->rows_max &&
             it->r0 >= 0 && it->r0 + it->rows <= (int64_t)p->H * mlav_info_q_len(p, it->b) &&
             it->k0 >= 0 && it->k0 <= it->k1 &&
             it->k1 <= mlav_shard_rows(p->shard, p->kv_lens[it->b]);
        if (ok && it->split < 0) {
            ok = it->group == -1;
        } else if (ok) {
            const cpu_group *gr = it->group >= 0 && it->group < sc->n_groups ? &groups[it->group]
                                                                              : NULL;
            ok = gr && it->split < gr->nsplit && gr->b == it->b && gr->r0 == it->r0 &&
                 gr->rows == it->rows;
        }
    }
    if (ok && sc->sum == sched_sum(p, sc, bd))
        return MLAV_OK;
    return mlav_set_error(MLAV_ERR_WORKSPACE,
                          "the workspace's cpu schedule is not the one its update wrote for "
                          "this step: was it written over since?");
}

/* ---- the work of one item ------------------------------------------------------------------ */

/* Widen n elements of a dtype buffer (starting at element `at`) into fp32. FP8 bytes are looked
 * up in `e4m3` (cpu_run's table of what each byte stands for; unused for other dtypes). */
static void widen(const void *src, int dt, size_t at, size_t n, const float *e4m3, float *dst)
{
    if (dt == MLAV_DTYPE_F32) {
        memcpy(dst, (const float *)src + at, n * sizeof(float));
    } else if (dt == MLAV_DTYPE_FP8_E4M3) {
        const uint8_t *b = (const uint8_t *)src + at;
        for (size_t k = 0; k < n; k++)
            dst[k] = e4m3[b[k]];
    } else if (dt == MLAV_DTYPE_BF16) {
        const uint16_t *h = (const uint16_t *)src + at;
        for (size_t k = 0; k < n; k++)
            dst[k] = mlav_bf16_to_f32(h[k]);
    } else {
        const uint16_t *h = (const uint16_t *)src + at;
        for (size_t k = 0; k < n; k++)
            dst[k] = mlav_f16_to_f32(h[k]);
    }
}

/* Store n floats as dtype elements (starting at element `at`), rounding to nearest even. */
static void narrow(const float *src, int dt, size_t at, size_t n, void *dst)
{
    if (dt == MLAV_DTYPE_F32) {
        memcpy((float *)dst + at, src, n * sizeof(float));
    } else if (dt == MLAV_DTYPE_BF16) {
        uint16_t *h = (uint16_t *)dst + at;
        for (size_t k = 0; k < n; k++)
            h[k] = mlav_f32_to_bf16(src[k]);
    } else {
        uint16_t *h = (uint16_t *)dst + at;
        for (size_t k = 0; k < n; k++)
            h[k] = mlav_f32_to_f16(src[k]);
    }
}

static int all_finite(const float *x, int32_t n)
{
    int ok = 1;
    for (int32_t k = 0; k < n; k++)
        ok &= (x[k] - x[k]) == 0.0f; /* false for NaN and +-Inf; no branch, so it vectorises */
    return ok;
}

/* Hide the draft keys of columns [c0, n) (the rank's KV rows j0 + c, judged at their global
 * rows against the global `prefix`) that a row's node does not see. */
static void mask_tile(const mlav_problem_info *p, const mlav_tensors *t, const cpu_item *it,
                      int64_t prefix, int64_t j0, int32_t c0, int32_t n, float *s, int32_t ld)
{
    const int32_t H = p->H;
    const int64_t q0 = p->q_indptr[it->b];
    for (int32_t rr = 0; rr < it->rows; rr++) {
        int32_t i = (int32_t)((it->r0 + rr) / H); /* the row's node */
        float *sr = s + (size_t)rr * (size_t)ld;
        for (int32_t c = c0; c < n; c++)
            if (!mlav_kv_visible(t->tree_mask, p->mask_words, q0 + i, i, prefix,
                                 mlav_shard_global(p->shard, j0 + c)))
                sr[c] = -INFINITY;
    }
}

/* exp(x) for the softmax's arguments x = s - max <= 0, in plain C that the compiler vectorises
 * (glibc's expf is a scalar call per score, a fifth of the run time at the reference shape).
 * Cephes' expf: x = n ln2 + r, |r| <= ln2/2, a degree-6 polynomial for e^r, then 2^n through the
 * exponent bits; within 1.5 ulp on [-87.3, 0]. Below -87.3 (including -inf, a hidden key) the
 * result is exactly 0, so a hidden key's probability is a true zero; NaN stays NaN (it flows
 * through the polynomial). The range test is on the bits, not a float compare: GCC will not
 * if-convert a float compare under the default -ftrapping-math, which would keep the loop
 * scalar. Not for x > 0, which the softmax never asks for. */
static inline float softmax_exp(float x)
{
    float t = x * 1.44269504088896341f;
    float big = t + 12582912.0f; /* 1.5 x 2^23: rounds t to an integer, kept in the low bits */
    float n = big - 12582912.0f;
    float r = x - n * 0.693359375f; /* ln 2 in two parts, so r is exact */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t scale_bits = (mlav_f32_to_bits(big) - 0x4B400000u + 127u) << 23;
    float e = p * mlav_bits_to_f32(scale_bits);
    /* x in [-inf, -87.3): bits above those of -87.3f (0xC2AE999A) up to -inf's (0xFF800000);
       negative NaNs lie above -inf and are kept */
    uint32_t u = mlav_f32_to_bits(x);
    uint32_t under = 0u - (uint32_t)((u > 0xC2AE999Au) & (u <= 0xFF800000u));
    return mlav_bits_to_f32(mlav_f32_to_bits(e) & ~under);
}

/* Fold row rr's fp32 sums since the last fold into its fp64 running state, times `alpha`
 * (the rescale to a new max: 1 when the max did not move), and clear them. */
static void fold_row(int32_t rr, int32_t Dl, double alpha, float *o, float *l, double *od,
                     double *ld)
{
    float *orow = o + (size_t)rr * (size_t)Dl;
    double *drow = od + (size_t)rr * (size_t)Dl;
    if (alpha == 1.0) {
        for (int32_t d = 0; d < Dl; d++)
            drow[d] += (double)orow[d];
        ld[rr] += (double)l[rr];
    } else {
        for (int32_t d = 0; d < Dl; d++)
            drow[d] = (drow[d] + (double)orow[d]) * alpha;
        ld[rr] = (ld[rr] + (double)l[rr]) * alpha;
    }
    memset(orow, 0, sizeof(float) * (size_t)Dl);
    l[rr] = 0.0f;
}

/* Online softmax over one tile for every row: turn scores into probabilities relative to the
 * new running max and add their sum to the row's fp32 sum; when the max moves, the sums so far
 * are folded into the fp64 state rescaled to the new max (in fp64, so that many rescales of a
 * long split do not add up fp32 rounding). The scores are s / tau, the probabilities
 * exp(tau (s - max)): tau is an FP8 cache's kv_scale (times the power of two fp8_q_shift took
 * out of q), tf the same in fp32 (clamped to FLT_MAX), 1 for other caches. Applied to the
 * differences, after the max is taken out, the scale meets no product it could overflow or
 * underflow in: a difference times a finite factor is finite or -inf, and the max's is 0. */
static void softmax_tile(int32_t rows, int32_t n, int32_t Dl, float *s, int32_t ld, float *o,
                         float *m, float *l, double *od, double *lsum, float tf, double tau)
{
    for (int32_t rr = 0; rr < rows; rr++) {
        float *sr = s + (size_t)rr * (size_t)ld;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int32_t c = 0; c < n; c++)
            mx = sr[c] > mx ? sr[c] : mx; /* skips NaN; it comes back through exp below */
        float mnew = m[rr] > mx ? m[rr] : mx;
        /* a row with nothing visible yet subtracts 0, not -inf: exp(-inf - -inf) would be NaN */
        float mref = mnew == -INFINITY ? 0.0f : mnew;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int32_t c = 0; c < n; c++) {
            float e = softmax_exp(tf * (sr[c] - mref));
            sr[c] = e;
            sum += e;
        }
        /* mlav_rescale_factor in fp64: 0 from an empty state, NaN from +inf to +inf */
        double alpha = m[rr] == -INFINITY ? 0.0 : exp(tau * ((double)m[rr] - (double)mnew));
        if (alpha != 1.0)
            fold_row(rr, Dl, alpha, o, l, od, lsum);
        l[rr] += sum;
        m[rr] = mnew;
    }
}

/* The unit of a split's partial lse: kv_scale where it is above 1, else 1 (merge_row). */
static double lse_unit(double kv_scale)
{
    return kv_scale > 1.0 ? kv_scale : 1.0;
}

/* An FP8 cache over huge q: q's rows times 2^-sh, so that the largest finite |q| is below
 * 2^100 and its dot products with e4m3 values (|x| <= 448) stay finite in fp32, where the scores
 * they make with a small kv_scale are finite (q ~ 1e36 over kv_scale 2^-126). Into sc->qf;
 * returns sh (0: q unchanged). */
static int fp8_q_shift(const float **q, size_t n, float *qf)
{
    float mx = 0.0f;
    for (size_t k = 0; k < n; k++) {
        const float a = fabsf((*q)[k]);
        mx = a <= 3.402823466e38f && a > mx ? a : mx;
    }
    int e;
    frexpf(mx, &e);
    if (e <= 100)
        return 0;
    const int sh = e - 100;
    const float down = ldexpf(1.0f, -sh);
    for (size_t k = 0; k < n; k++)
        qf[k] = (*q)[k] * down;
    *q = qf;
    return sh;
}

static void run_item(const mlav_problem_info *p, const cpu_sched *sd, const cpu_group *groups,
                     const mlav_tensors *t, const cpu_item *it, const cpu_scratch *sc,
                     const float *e4m3, double kv_scale, float *parts)
{
    const int32_t H = p->H, W = p->W, Dl = p->Dl, tile = sd->tile, rows = it->rows;
    const int dt = (int)p->dtype, kdt = (int)p->kv_dtype;
    const int64_t prefix = mlav_info_prefix(p, it->b);
    const int64_t local_prefix = mlav_shard_rows(p->shard, prefix); /* the rank's prefix rows */
    const int32_t *pt_row = it->k1 > it->k0 ? mlav_page_row(p, t, it->b) : NULL;
    const size_t row0 = (size_t)p->q_indptr[it->b] * (size_t)H + (size_t)it->r0; /* in q, out */

    const float *q;
    if (dt == MLAV_DTYPE_F32) {
        q = (const float *)t->q + row0 * (size_t)W;
    } else {
        widen(t->q, dt, row0 * (size_t)W, (size_t)rows * (size_t)W, NULL, sc->qf);
        q = sc->qf;
    }
    /* the softmax's temperature (softmax_tile): kv_scale x 2^sh */
    double tau = 1.0;
    if (kdt == MLAV_DTYPE_FP8_E4M3)
        tau = ldexp(kv_scale, fp8_q_shift(&q, (size_t)rows * (size_t)W, sc->qf));
    const float tf = tau < 3.402823466e38 ? (float)tau : 3.402823466e38f;
    memset(sc->o, 0, sizeof(float) * (size_t)rows * (size_t)Dl);
    memset(sc->od, 0, sizeof(double) * (size_t)rows * (size_t)Dl);
    for (int32_t rr = 0; rr < rows; rr++) {
        sc->m[rr] = -INFINITY;
        sc->l[rr] = 0.0f;
        sc->ld[rr] = 0.0;
    }

    int32_t unfolded = 0; /* tiles summed in fp32 since the last fold */
    for (int64_t j0 = it->k0; j0 < it->k1; j0 += tile) {
        int32_t n = (int32_t)(it->k1 - j0 < tile ? it->k1 - j0 : tile);
        /* prefix columns [0, np) are visible to every row; draft columns [np, n) per the mask */
        const int64_t lp = local_prefix, np64 = lp - j0 < 0 ? 0 : (lp - j0 > n ? n : lp - j0);
        int32_t np = (int32_t)np64;
        int draft_bad = 0;
        for (int32_t c = 0; c < n; c++) {
            size_t src = mlav_kv_row_index(p, pt_row, j0 + c) * (size_t)W;
            float *dst = sc->kt + (size_t)c * (size_t)W;
            widen(t->kv_cache, kdt, src, (size_t)W, e4m3, dst);
            if (c >= np)
                draft_bad |= !all_finite(dst, Dl);
        }

        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, W, p->scale, q, W, sc->kt,
                    W, 0.0f, sc->s, tile);
        if (np < n)
            mask_tile(p, t, it, prefix, j0, np, n, sc->s, tile);
        softmax_tile(rows, n, Dl, sc->s, tile, sc->o, sc->m, sc->l, sc->od, sc->ld, tf, tau);

        if (!draft_bad) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, Dl, n, 1.0f, sc->s, tile,
                        sc->kt, W, 1.0f, sc->o, Dl);
        } else {
            /* A draft row holds NaN/Inf: a GEMM would give 0 x NaN = NaN to the rows that do not
             * see it, so those columns are added only where their probability is non-zero. */
            if (np > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, Dl, np, 1.0f, sc->s,
                            tile, sc->kt, W, 1.0f, sc->o, Dl);
            for (int32_t rr = 0; rr < rows; rr++) {
                float *orow = sc->o + (size_t)rr * (size_t)Dl;
                for (int32_t c = np; c < n; c++) {
                    float pv = sc->s[(size_t)rr * (size_t)tile + (size_t)c];
                    if (pv == 0.0f)
                        continue;
                    const float *v = sc->kt + (size_t)c * (size_t)W;
                    for (int32_t d = 0; d < Dl; d++)
                        orow[d] += pv * v[d];
                }
            }
        }
        if (++unfolded == CPU_FOLD_TILES) {
            for (int32_t rr = 0; rr < rows; rr++)
                fold_row(rr, Dl, 1.0, sc->o, sc->l, sc->od, sc->ld);
            unfolded = 0;
        }
    }
    if (unfolded > 0)
        for (int32_t rr = 0; rr < rows; rr++)
            fold_row(rr, Dl, 1.0, sc->o, sc->l, sc->od, sc->ld);

    /* finish: normalise; a row that saw nothing is out = 0, lse = -inf. An FP8 cache's values
     * were e4m3 alone: kv_scale multiplies the output here, in fp64 with the normalisation, so
     * that it rounds once (a split's partial state keeps the unscaled values: merge_row) */
    const double out_scale = it->split < 0 ? kv_scale : 1.0;
    for (int32_t rr = 0; rr < rows; rr++) {
        float *orow = sc->o + (size_t)rr * (size_t)Dl;
        const double *drow = sc->od + (size_t)rr * (size_t)Dl;
        const double lsum = sc->ld[rr];
        /* mlav_finish_lse in fp64: max + log(sum), -inf for an empty row, NaN for a NaN sum */
        /* a split's partial lse is kept divided by lse_unit (merge_row says why) */
        float lse = lsum > 0.0 ? (float)((tau * (double)sc->m[rr] + log(lsum)) /
                                         (it->split < 0 ? 1.0 : lse_unit(kv_scale)))
                               : (lsum == 0.0 ? -INFINITY : NAN);
        if (lsum == 0.0) {
            memset(orow, 0, sizeof(float) * (size_t)Dl);
        } else {
            double inv = out_scale / lsum;
            for (int32_t d = 0; d < Dl; d++)
                orow[d] = (float)(drow[d] * inv);
        }
        if (it->split < 0) {
            narrow(orow, dt, (row0 + (size_t)rr) * (size_t)Dl, (size_t)Dl, t->out);
            if (t->lse)
                t->lse[row0 + (size_t)rr] = lse;
        } else {
            const cpu_group *g = &groups[it->group];
            float *po = parts + g->part + ((size_t)it->split * (size_t)rows + (size_t)rr) * (size_t)Dl;
            float *pl = parts + g->part + (size_t)g->nsplit * (size_t)rows * (size_t)Dl +
                        (size_t)it->split * (size_t)rows + (size_t)rr;
            memcpy(po, orow, sizeof(float) * (size_t)Dl);
            *pl = lse;
        }
    }
}

/* Merge row rr of a split group into out/lse, with the shared merge math (merge.h); an FP8
 * cache's partial states are unscaled, and kv_scale multiplies the merged row (in fp64, one
 * rounding). */
static void merge_row(const mlav_problem_info *p, const mlav_tensors *t, const cpu_group *g,
                      int32_t rr, const float *parts, double kv_scale, float *acc)
{
    const int32_t Dl = p->Dl, rows = g->rows;
    float lv[CPU_MAX_SPLITS], w[CPU_MAX_SPLITS];
    const float *po = parts + g->part, *pl = po + (size_t)g->nsplit * (size_t)rows * (size_t)Dl;
    for (int32_t s = 0; s < g->nsplit; s++)
        lv[s] = pl[(size_t)s * (size_t)rows + (size_t)rr];
    /* An FP8 cache's partial lse values are kept in units of lse_unit: at kv_scale FLT_MAX an lse
     * is past fp32's range where the output is not (scores of 1e38 and more, a one-hot softmax),
     * and inf - inf would make the merge NaN; divided by the scale they are finite. The merge
     * rule then weighs their differences times the unit (exp(u (x_s - x_max))), in fp64, and the
     * merged lse is u x_max plus the rule's. */
    const double u = lse_unit(kv_scale);
    double base = 0.0;
    if (u != 1.0) {
        float mx = -INFINITY;
        for (int32_t s = 0; s < g->nsplit; s++)
            mx = lv[s] > mx ? lv[s] : mx;
        if (isfinite(mx)) {
            base = u * (double)mx;
            for (int32_t s = 0; s < g->nsplit; s++)
                lv[s] = (float)(u * ((double)lv[s] - (double)mx));
        }
    }
    float lse = mlav_merge_weights(g->nsplit, lv, w);
    if (u != 1.0)
        lse = (float)(base + (double)lse);
    for (int32_t d = 0; d < Dl; d++)
        acc[d] = 0.0f;
    for (int32_t s = 0; s < g->nsplit; s++) {
        if (w[s] == 0.0f) /* an empty split adds nothing (its o is 0 anyway) */
            continue;
        const float *o = po + ((size_t)s * (size_t)rows + (size_t)rr) * (size_t)Dl;
        for (int32_t d = 0; d < Dl; d++)
            acc[d] += w[s] * o[d];
    }
    if (kv_scale != 1.0)
        for (int32_t d = 0; d < Dl; d++)
            acc[d] = (float)((double)acc[d] * kv_scale);
    size_t row = (size_t)p->q_indptr[g->b] * (size_t)p->H + (size_t)g->r0 + (size_t)rr;
    narrow(acc, (int)p->dtype, row * (size_t)Dl, (size_t)Dl, t->out);
    if (t->lse)
        t->lse[row] = lse;
}

static mlav_status cpu_run(const mlav_problem_info *p, const void *state, const mlav_tensors *t,
                           void *workspace, size_t workspace_bytes, void *stream)
{
    (void)stream;
    const cpu_state *st = state;
    if (t->memory != MLAV_MEM_HOST)
        return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                              "the cpu backend needs host tensors; these are device memory "
                              "(use a CUDA context, or copy them to the host)");
    /* the schedule: the plan's, or the one the workspace's update wrote for this step */
    const cpu_sched *sd = st->one;
    if (!sd) {
        if (!workspace || workspace_bytes < st->sched_bytes)
            return mlav_set_error(MLAV_ERR_WORKSPACE, "the cpu backend's workspace of %zu bytes "
                                                      "has no room for its schedule",
                                  workspace ? workspace_bytes : 0);
        sd = workspace;
        mlav_status s = sched_check(p, st, sd);
        if (s != MLAV_OK)
            return s;
    }
    if (sd->n_items == 0)
        return MLAV_OK;
    size_t need = st->sched_bytes +
                  sizeof(float) * ((size_t)st->nthreads * st->thread_floats + st->bd.part_floats);
    if (!workspace || workspace_bytes < need)
        return mlav_set_error(MLAV_ERR_WORKSPACE,
                              "the cpu backend needs a %zu-byte workspace, got %zu bytes", need,
                              workspace ? workspace_bytes : 0);
    const cpu_item *items = sched_items(sd);
    const cpu_group *groups = sched_groups(sd, &st->bd);

    /* An FP8 cache is widened through this table of the 256 values e4m3(byte), exact in fp32;
     * kv_scale is applied outside the products (docs/DESIGN.md#fp8-kv): on the scores' softmax
     * (softmax_tile's tau) and on the output (run_item's finish, merge_row), in fp64. Folded
     * into the table, the values x kv_scale overflowed the scores' GEMM at kv_scale FLT_MAX
     * (inf - inf = NaN where the oracle's output is finite) and rounded as subnormals at 2^-140
     * (rel-L2 9e-4 against 1e-5). */
    float kv_scale, e4m3[256];
    mlav_status s = mlav_kv_scale_host(p, t, &kv_scale);
    if (s != MLAV_OK)
        return s;
    if (p->kv_dtype == MLAV_DTYPE_FP8_E4M3)
        for (int b = 0; b < 256; b++)
            e4m3[b] = mlav_e4m3_to_f32((uint8_t)b);

    float *ws = (float *)(void *)((char *)workspace + st->sched_bytes);
    float *parts = ws + (size_t)st->nthreads * st->thread_floats;
    /* At most the plan's thread count: the workspace has that many scratch slots. Inside this
     * region OpenBLAS sees omp_in_parallel() and runs each sgemm on the calling thread. */
#pragma omp parallel num_threads(st->nthreads)
    {
        cpu_scratch sc;
        int tid = omp_get_thread_num();
        scratch_layout(p, sd->rows_max, sd->tile, ws + (size_t)tid * st->thread_floats, &sc);
#pragma omp for schedule(dynamic, 1)
        for (int32_t k = 0; k < sd->n_items; k++)
            run_item(p, sd, groups, t, &items[k], &sc, e4m3, (double)kv_scale, parts);
        /* the implicit barrier above: every partial state is written before any merge */
        for (int32_t g = 0; g < sd->n_groups; g++) {
#pragma omp for schedule(static) nowait
            for (int32_t rr = 0; rr < groups[g].rows; rr++)
                merge_row(p, t, &groups[g], rr, parts, (double)kv_scale, sc.o);
        }
    }
    return MLAV_OK;
}

const mlav_backend_ops mlav_backend_cpu_ops = {
    .name = "cpu",
    .id = MLAV_BACKEND_CPU,
    .workspace_memory = MLAV_MEM_HOST,
    .available = cpu_available,
    .plan = cpu_plan,
    .update = cpu_update,
    .run = cpu_run,
    .free = cpu_free,
    .workspace_alloc = mlav_host_workspace_alloc,
    .workspace_free = mlav_host_workspace_free,
};
