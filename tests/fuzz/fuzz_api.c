/* libFuzzer target for the API surface: random problem descriptors, lengths, page tables, masks,
 * values (NaN/Inf included), FP8 caches with their scales (values and kv_scale_ptr, bad ones
 * too), workspaces, residency and alignment thrown at plan + run / verify on the cpu and
 * reference backends with small dims, plus the tree helpers, merge_states and names, and plans
 * for limits (any limits, then steps of any lengths, updated and run; two plans sharing one
 * workspace, each refused on the other's step).
 * Every call must give a status and a sentence, never write outside out/lse, never touch an
 * input; a run that succeeds writes every out/lse element and agrees with the fp64 oracle. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/common/dtype.h"
#include "mlaverify.h"

#define MAXB 4
#define GUARD 64
#define GUARD_BYTE 0xA5
/* Budgets that keep one input well under a millisecond or so (the reference runs in double). */
#define MAX_Q_ELEMS (1 << 17)
#define MAX_POOL_ELEMS (1 << 19)
#define MAX_TABLE (1 << 15)
#define MAX_WORK 300000.0

#define FUZZ_REQUIRE(cond, ...)                                                                    \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_api: " __VA_ARGS__);                                             \
            fprintf(stderr, " [%s:%d: %s]\n", __FILE__, __LINE__, #cond);                          \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* ---- input reader: past the end every read is 0, so any input is a complete program -------- */

typedef struct rd {
    const uint8_t *p;
    size_t n;
} rd;

static uint32_t u8(rd *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

static uint32_t u16(rd *r)
{
    uint32_t lo = u8(r);
    return lo | (u8(r) << 8);
}

static uint32_t u32(rd *r)
{
    uint32_t lo = u16(r);
    return lo | (u16(r) << 16);
}

static int32_t i32(rd *r)
{
    uint32_t u = u32(r);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static float f32(rd *r)
{
    uint32_t u = u32(r);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A length a liar would pick: the edges of every limit, or anything at all. */
static int32_t lie(rd *r)
{
    static const int32_t edges[] = {0,         -1,        1,         2,          INT32_MAX,
                                    INT32_MIN, 4096,      4097,      16384,      16385,
                                    1 << 20,   (1 << 20) + 1, 1 << 30, INT32_MAX - 1, 65536};
    uint32_t k = u8(r);
    if (k < 2 * (sizeof edges / sizeof edges[0]))
        return edges[k % (sizeof edges / sizeof edges[0])];
    return i32(r);
}

static uint64_t mix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float uniform(uint64_t *x)
{
    return (float)((double)(mix(x) >> 40) / 8388608.0 - 1.0);
}

/* FP8 scales an engine may have, and ones the library must refuse */
static const float good_kv_scales[8] = {0x1p-6f, 0.0173f, 0.25f, 1.0f,
                                        3.5f,    4.0f,    0x1p-20f, 100.0f};
static const float bad_kv_scales[4] = {0.0f, -1.0f, NAN, INFINITY};

/* Store KV value v as element k: divided by the scale and quantized for FP8 (as an engine's
 * quantizer fills its cache), else rounded to the dtype. */
static void store_kv(void *kv, mlav_dtype kv_dtype, size_t k, float v, float kv_scale)
{
    const int fp8 = kv_dtype == MLAV_DTYPE_FP8_E4M3;
    mlav_store_from_f32(kv, (int)kv_dtype, k, fp8 ? v / kv_scale : v);
}

/* ---- guarded buffers ------------------------------------------------------------------------ */

typedef struct guarded {
    unsigned char *alloc;
    void *p;
    size_t bytes;
} guarded;

static guarded guarded_new(size_t bytes)
{
    guarded g = {.bytes = bytes};
    g.alloc = malloc(bytes + 2 * GUARD + 8);
    FUZZ_REQUIRE(g.alloc, "out of memory");
    memset(g.alloc, GUARD_BYTE, bytes + 2 * GUARD + 8);
    g.p = g.alloc + GUARD;
    return g;
}

static int guarded_ok(const guarded *g)
{
    for (size_t i = 0; i < GUARD; i++)
        if (g->alloc[i] != GUARD_BYTE || g->alloc[GUARD + g->bytes + i] != GUARD_BYTE)
            return 0;
    return 1;
}

/* Poison bits no computation produces (a NaN payload our inputs never hold), so a run that
 * succeeded must have replaced every one of them. */
static void poison(void *p, size_t n, size_t esz)
{
    for (size_t k = 0; k < n; k++) {
        if (esz == 4) {
            uint32_t v = 0x7fa5a5a5u;
            memcpy((char *)p + 4 * k, &v, 4);
        } else {
            uint16_t v = 0x7da5u; /* a NaN in both bf16 and f16 */
            memcpy((char *)p + 2 * k, &v, 2);
        }
    }
}

static int is_poison(const void *p, size_t k, size_t esz)
{
    if (esz == 4) {
        uint32_t v;
        memcpy(&v, (const char *)p + 4 * k, 4);
        return v == 0x7fa5a5a5u;
    }
    uint16_t v;
    memcpy(&v, (const char *)p + 2 * k, 2);
    return v == 0x7da5u;
}

static int all_poison(const void *p, size_t n, size_t esz)
{
    for (size_t k = 0; k < n; k++)
        if (!is_poison(p, k, esz))
            return 0;
    return 1;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);
    FUZZ_REQUIRE(d, "out of memory");
    if (n)
        memcpy(d, p, n);
    return d;
}

static mlav_context *ctx_cpu, *ctx_ref;
static int verbose;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    verbose = getenv("FUZZ_VERBOSE") != NULL;
    if (mlav_context_create(&ctx_cpu, MLAV_BACKEND_CPU) != MLAV_OK ||
        mlav_context_create(&ctx_ref, MLAV_BACKEND_REFERENCE) != MLAV_OK) {
        fprintf(stderr, "fuzz_api: no context: %s\n", mlav_last_error(NULL));
        abort();
    }
    return 0;
}

static void require_failure(mlav_status s, const char *what)
{
    FUZZ_REQUIRE(s == MLAV_ERR_INVALID_ARG || s == MLAV_ERR_UNSUPPORTED ||
                     s == MLAV_ERR_WORKSPACE || s == MLAV_ERR_OUT_OF_MEMORY,
                 "%s: unexpected status %s: %s", what, mlav_status_string(s),
                 mlav_last_error(NULL));
    FUZZ_REQUIRE(mlav_last_error(NULL)[0] != '\0', "%s: %s without a sentence", what,
                 mlav_status_string(s));
}

/* ---- plan + run ----------------------------------------------------------------------------- */

static void fuzz_problem(rd *r, int lying)
{
    const uint32_t f = u8(r), g = u8(r);
    mlav_context *ctx = (f & 1) ? ctx_ref : ctx_cpu;
    static const int32_t page_sizes[8] = {1, 1, 2, 3, 4, 7, 16, 64};
    int32_t qi[MAXB + 1], kl[MAXB];
    const int32_t B = 1 + (int32_t)(u8(r) % MAXB);
    mlav_problem p = {
        .num_heads = 1 + (int32_t)(u8(r) % 4),
        .d_latent = 1 + (int32_t)(u8(r) % 32),
        .d_rope = (int32_t)(u8(r) % 9),
        .dtype = (mlav_dtype)(u8(r) % 3),
        .page_size = page_sizes[u8(r) % 8],
        .batch = B,
        .q_indptr = qi,
        .kv_lens = kl,
    };
    uint32_t sc = u8(r);
    p.softmax_scale = (sc & 1) ? 0.0625f * (float)(1 + sc % 16) : -0.5f;
    /* An FP8 cache: sc's high bit (its low four make the softmax scale), then a byte of its own:
     * bits 0-2 the scale, bit 3 through kv_scale_ptr, bits 4-7 a liar's choices below */
    uint32_t k8 = 0;
    if (sc & 0x80) {
        k8 = u8(r);
        p.kv_dtype = MLAV_DTYPE_FP8_E4M3;
    }
    float kv_scale = good_kv_scales[k8 % 8];
    const int scale_by_ptr = (k8 >> 3) & 1;
    int bad_scale = 0;
    if (lying && (sc & 0x80)) {
        switch ((k8 >> 4) & 3) {
        case 1: bad_scale = 1; kv_scale = bad_kv_scales[(k8 >> 6) & 3]; break;
        case 2: p.kv_dtype = (mlav_dtype)((k8 >> 6) & 3); break; /* F32, BF16, F16 or FP8 */
        case 3: p.dtype = (k8 & 0x40) ? MLAV_DTYPE_FP8_E4M3 : p.dtype; break;
        default: break;
        }
    }
    qi[0] = 0;
    int64_t need_pages = 1;
    for (int32_t b = 0; b < B; b++) {
        int32_t q = (int32_t)(u8(r) % 35); /* 33 and 34 cross into a second mask word */
        /* mostly short (fast inputs); sometimes long enough for the CPU backend's KV splits */
        uint32_t len = u8(r);
        int32_t prefix = (len & 0x80) ? (int32_t)(u16(r) % 700) : (int32_t)(len % 48);
        qi[b + 1] = qi[b] + q;
        kl[b] = prefix + q;
        int64_t pages = ((int64_t)kl[b] + p.page_size - 1) / p.page_size;
        if (pages > need_pages)
            need_pages = pages;
    }
    p.max_pages = (int32_t)need_pages + (int32_t)(u8(r) % 3);
    if (lying) {
        for (uint32_t n = 1 + u8(r) % 3; n > 0; n--) {
            switch (u8(r) % 10) {
            case 0: p.num_heads = lie(r); break;
            case 1: p.d_latent = lie(r); break;
            case 2: p.d_rope = lie(r); break;
            case 3: p.page_size = lie(r); break;
            case 4: { /* smaller is a valid batch; the arrays are only ever B long */
                static const int32_t small[4] = {0, -1, INT32_MIN, 1};
                p.batch = small[u8(r) % 4];
                break;
            }
            case 5: qi[u8(r) % (uint32_t)(B + 1)] = lie(r); break;
            case 6: kl[u8(r) % (uint32_t)B] = lie(r); break;
            case 7: p.max_pages = lie(r); break;
            case 8: p.softmax_scale = f32(r); break;
            default: p.dtype = (mlav_dtype)lie(r); break;
            }
        }
    }

    mlav_plan *plan = NULL;
    mlav_status s = mlav_plan_create(ctx, &p, &plan);
    if (verbose) /* FUZZ_VERBOSE=1: what an input asks for, to triage a finding */
        fprintf(stderr, "fuzz_api: %s H=%d dims=%d+%d dtype=%d kv_dtype=%d page=%d B=%d "
                        "max_pages=%d scale=%g kv_scale=%g%s lying=%d: plan %s\n",
                ctx == ctx_cpu ? "cpu" : "reference", p.num_heads, p.d_latent, p.d_rope,
                (int)p.dtype, (int)p.kv_dtype, p.page_size, p.batch, p.max_pages,
                (double)p.softmax_scale, (double)kv_scale, scale_by_ptr ? " (ptr)" : "", lying,
                mlav_status_string(s));
    if (s != MLAV_OK) {
        FUZZ_REQUIRE(plan == NULL, "a failed plan_create returned a plan");
        require_failure(s, "plan_create");
        return;
    }

    /* The problem is valid: size the tensors from it (or give up on what is too big to run). */
    const int32_t H = p.num_heads, Dl = p.d_latent, W = p.d_latent + p.d_rope, PS = p.page_size;
    const int32_t Bv = p.batch, T = qi[Bv];
    const size_t esz = mlav_dtype_size(p.dtype);
    /* the cache's dtype as the plan took it: 0 (F32) is the q dtype */
    const mlav_dtype kdt = p.kv_dtype == MLAV_DTYPE_F32 ? p.dtype : p.kv_dtype;
    const int fp8 = kdt == MLAV_DTYPE_FP8_E4M3;
    const size_t kv_esz = mlav_dtype_size(kdt);
    int32_t max_q = 0;
    int64_t used_pages = 0;
    double work = 0.0;
    for (int32_t b = 0; b < Bv; b++) {
        int32_t q = qi[b + 1] - qi[b];
        if (q > max_q)
            max_q = q;
        used_pages += ((int64_t)kl[b] + PS - 1) / PS;
        work += (double)q * H * (double)kl[b] * W;
    }
    const int32_t words = mlav_tree_mask_words(max_q);
    const int64_t num_pages = used_pages + (int64_t)(u8(r) % 3) + (used_pages == 0);
    const double q_elems = (double)T * H * W, pool_elems = (double)num_pages * PS * W;
    const double table = (double)Bv * p.max_pages;
    if (q_elems > MAX_Q_ELEMS || pool_elems > MAX_POOL_ELEMS || table > MAX_TABLE ||
        work > MAX_WORK || (double)T * words > MAX_TABLE) {
        mlav_plan_free(plan);
        return;
    }
    const size_t nq = (size_t)T * (size_t)H * (size_t)W;
    const size_t nkv = (size_t)num_pages * (size_t)PS * (size_t)W;
    const size_t nout = (size_t)T * (size_t)H * (size_t)Dl, nlse = (size_t)T * (size_t)H;
    const size_t npt = (size_t)Bv * (size_t)p.max_pages, nmask = (size_t)T * (size_t)words;

    uint64_t rng = ((uint64_t)u32(r) << 32) | u32(r);
    /* +8: room for a pointer moved off its alignment */
    unsigned char *q = malloc(nq * esz + 8), *kv = malloc(nkv * kv_esz + 8);
    int32_t *pt = malloc(sizeof(int32_t) * npt + 8);
    uint32_t *mask = malloc(sizeof(uint32_t) * (nmask ? nmask : 1) + 8);
    FUZZ_REQUIRE(q && kv && pt && mask, "out of memory");
    const float amp = (g & 3) == 0 ? 4.0f : ((g & 3) == 1 ? 0.01f : 1.0f);
    for (size_t k = 0; k < nq; k++)
        mlav_store_from_f32(q, (int)p.dtype, k, amp * uniform(&rng));
    for (size_t k = 0; k < nkv; k++)
        store_kv(kv, kdt, k, amp * uniform(&rng), kv_scale);
    int poisoned = 0;
    if (g & 0x04) {
        static const float bad[6] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN};
        for (uint32_t n = 1 + u8(r) % 3; n > 0; n--) {
            uint32_t which = u8(r);
            float v = bad[u8(r) % 6];
            if ((which & 1) && nq)
                mlav_store_from_f32(q, (int)p.dtype, u32(r) % nq, v);
            else if (nkv) /* in FP8, NaN is 0x7f and the infinities saturate to +-448 */
                mlav_store_from_f32(kv, (int)kdt, u32(r) % nkv, v);
            poisoned = 1;
        }
    }
    /* page table: every request's pages, shuffled over the pool; spare slots hold garbage,
     * which is allowed past a request's last page */
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)num_pages);
    FUZZ_REQUIRE(perm, "out of memory");
    for (int64_t k = 0; k < num_pages; k++)
        perm[k] = k;
    for (int64_t k = num_pages - 1; k > 0; k--) {
        int64_t j = (int64_t)(mix(&rng) % (uint64_t)(k + 1));
        int64_t t = perm[k];
        perm[k] = perm[j];
        perm[j] = t;
    }
    int64_t next = 0;
    for (int32_t b = 0; b < Bv; b++) {
        int64_t pages = ((int64_t)kl[b] + PS - 1) / PS;
        for (int32_t k = 0; k < p.max_pages; k++)
            pt[(size_t)b * (size_t)p.max_pages + (size_t)k] =
                k < pages ? (int32_t)perm[next++] : (int32_t)mix(&rng);
    }
    free(perm);
    int lied_tensors = 0;
    if ((g & 0x08) && npt) {
        pt[u16(r) % npt] = (u8(r) & 1) ? (int32_t)num_pages + (int32_t)(u8(r) % 3) - 1 : lie(r);
        lied_tensors = 1;
    }
    int use_mask = (f & 4) != 0;
    for (int32_t b = 0; b < Bv && use_mask; b++) {
        int32_t q_len = qi[b + 1] - qi[b];
        for (int32_t i = 0; i < q_len; i++) {
            uint32_t *row = mask + (size_t)(qi[b] + i) * (size_t)words;
            for (int32_t w = 0; w < words; w++) {
                int32_t first = w * 32;
                uint32_t valid = first >= q_len ? 0u
                                 : q_len - first >= 32 ? 0xffffffffu
                                                       : (1u << (q_len - first)) - 1u;
                row[w] = (uint32_t)mix(&rng) & valid;
            }
            if (g & 0x10)
                row[i / 32] |= 1u << (i % 32); /* itself, as a tree mask has it */
        }
    }
    if (use_mask && (g & 0x20) && nmask) {
        mask[u16(r) % nmask] |= 1u << (u8(r) % 32); /* maybe a node >= q_len */
        lied_tensors = 1;
    }

    guarded out = guarded_new(nout * esz), lse = guarded_new(nlse * sizeof(float));
    poison(out.p, nout, esz);
    poison(lse.p, nlse, sizeof(float));
    mlav_tensors t = {
        .memory = MLAV_MEM_HOST,
        .q = q,
        .kv_cache = kv,
        .num_pages = num_pages,
        .page_table = pt,
        .tree_mask = use_mask ? mask : NULL,
        .out = out.p,
        .lse = (g & 0x40) ? NULL : lse.p,
    };
    /* the FP8 scale: the host value, or through kv_scale_ptr with a bad value beside it (which
     * must then be ignored); room past it for a pointer moved off its alignment */
    float scale_store[3] = {kv_scale, 0.0f, 0.0f}, scale0[3];
    if (sc & 0x80) {
        t.kv_scale = scale_by_ptr ? -1.0f : kv_scale;
        t.kv_scale_ptr = scale_by_ptr ? scale_store : NULL;
        if (bad_scale && fp8)
            lied_tensors = 1;
    }
    memcpy(scale0, scale_store, sizeof scale0);
    if (f & 0x08) { /* residency a CPU context cannot serve, or no residency at all */
        t.memory = (mlav_memory)(int32_t)(1 + u8(r) % 3);
        lied_tensors = 1;
    }
    if ((f & 0x10) && (nq || nkv || nout)) {
        /* a pointer one byte off its element alignment (the buffers have room for it); for an FP8
         * cache, a kv_cache one byte off is aligned */
        switch (u8(r) % 7) {
        case 0: t.q = q + 1; break;
        case 1: t.kv_cache = kv + 1; break;
        case 2: t.page_table = (const int32_t *)(const void *)((const char *)pt + 2); break;
        case 3: t.tree_mask = (const uint32_t *)(const void *)((const char *)mask + 1); break;
        case 4: t.out = (char *)out.p + 1; break;
        case 5: t.lse = (float *)(void *)((char *)lse.p + 2); break;
        default: /* kv_scale_ptr where there is one, else lse */
            if (t.kv_scale_ptr)
                t.kv_scale_ptr = (const float *)(const void *)((const char *)scale_store + 1);
            else
                t.lse = (float *)(void *)((char *)lse.p + 2);
            break;
        }
        lied_tensors = 1;
    }
    if (f & 0x20) { /* a NULL where a tensor belongs */
        switch (u8(r) % 4) {
        case 0: t.q = NULL; break;
        case 1: t.kv_cache = NULL; break;
        case 2: t.page_table = NULL; break;
        default: t.out = NULL; break;
        }
        lied_tensors = 1;
    }
    if (f & 0x40) {
        /* a pool said to be larger than it is cannot be caught (the library has no buffer
         * sizes); it is harmless only while every id in use is inside the real pool */
        int64_t v = lie(r);
        if (v > num_pages && (g & 0x08))
            v = num_pages - 1 - (v & 1);
        t.num_pages = v;
        lied_tensors = 1;
    }

    void *q0 = dup_bytes(q, nq * esz + 8), *kv0 = dup_bytes(kv, nkv * kv_esz + 8);
    void *pt0 = dup_bytes(pt, sizeof(int32_t) * npt + 8);
    void *mask0 = dup_bytes(mask, sizeof(uint32_t) * (nmask ? nmask : 1) + 8);

    size_t ws_need = mlav_plan_workspace_bytes(plan), ws_give = ws_need;
    void *ws = NULL;
    FUZZ_REQUIRE(posix_memalign(&ws, 256, ws_need + 256) == 0, "out of memory");
    void *ws_ptr = ws;
    if (f & 0x80) {
        switch (u8(r) % 3) {
        case 0: ws_give = ws_need ? ws_need - 1 : 0; break;
        case 1: ws_ptr = NULL; break;
        default: ws_ptr = (char *)ws + 64; break;
        }
    }
    if (verbose) {
        fprintf(stderr, "fuzz_api:   T=%d q_lens/kv_lens:", T);
        for (int32_t b = 0; b < Bv; b++)
            fprintf(stderr, " %d/%d", qi[b + 1] - qi[b], kl[b]);
        fprintf(stderr, " num_pages=%lld mask=%d poisoned=%d lied=%d work=%.0f\n",
                (long long)num_pages, use_mask, poisoned, lied_tensors, work);
        fprintf(stderr, "fuzz_api:   tensors: memory=%d q%+td kv%+td pt%+td mask%+td out%+td "
                        "lse%+td (offsets from the buffers; NULL shown as 0) num_pages=%lld "
                        "ws %zu of %zu%s\n",
                (int)t.memory, t.q ? (const unsigned char *)t.q - q : 0,
                t.kv_cache ? (const unsigned char *)t.kv_cache - kv : 0,
                t.page_table ? (const char *)t.page_table - (const char *)pt : 0,
                t.tree_mask ? (const char *)t.tree_mask - (const char *)mask : 0,
                t.out ? (const char *)t.out - (const char *)out.p : 0,
                t.lse ? (const char *)t.lse - (const char *)lse.p : 0, (long long)t.num_pages,
                ws_give, ws_need, ws_ptr == ws ? "" : " (moved or NULL)");
    }
    if (g & 0x80)
        s = mlav_verify(ctx, &p, &t);
    else
        s = mlav_run(plan, &t, ws_ptr, ws_give, NULL);

    if (verbose)
        fprintf(stderr, "fuzz_api:   %s: %s %s\n", (g & 0x80) ? "verify" : "run",
                mlav_status_string(s), s == MLAV_OK ? "" : mlav_last_error(NULL));
    FUZZ_REQUIRE(guarded_ok(&out) && guarded_ok(&lse), "a write outside out/lse (%s)",
                 mlav_status_string(s));
    FUZZ_REQUIRE(memcmp(q, q0, nq * esz + 8) == 0 && memcmp(kv, kv0, nkv * kv_esz + 8) == 0 &&
                     memcmp(scale_store, scale0, sizeof scale0) == 0 &&
                     memcmp(pt, pt0, sizeof(int32_t) * npt + 8) == 0 &&
                     memcmp(mask, mask0, sizeof(uint32_t) * (nmask ? nmask : 1) + 8) == 0,
                 "an input tensor was written (%s)", mlav_status_string(s));
    FUZZ_REQUIRE(s != MLAV_OK || !(bad_scale && fp8), "kv_scale %g was taken",
                 (double)kv_scale);
    if (s != MLAV_OK) {
        require_failure(s, "run");
        FUZZ_REQUIRE(all_poison(out.p, nout, esz) && all_poison(lse.p, nlse, sizeof(float)),
                     "a failed run (%s) wrote out or lse", mlav_status_string(s));
    } else {
        const float *l = (const float *)lse.p;
        for (size_t k = 0; k < nout; k++)
            FUZZ_REQUIRE(!is_poison(t.out, k, esz), "out[%zu] not written", k);
        for (size_t k = 0; t.lse && k < nlse; k++) {
            FUZZ_REQUIRE(!is_poison(l, k, sizeof(float)), "lse[%zu] not written", k);
            /* no visible key: out = 0, lse = -inf. The converse holds on the cpu backend (its
             * fp32 scores overflow first, and such a row reads as empty), but not on the fp64
             * oracle, whose exact lse may lie past fp32's range (|scale x q.k| > 3.4e38, from a
             * huge scale or FLT_MAX inputs) and round to -inf while its out is right, nor on the
             * cpu backend over an FP8 cache, which applies kv_scale to the score differences
             * (docs/DESIGN.md#fp8-kv) and so has the oracle's out where kv_scale x score passes
             * fp32's range */
            if (l[k] == -INFINITY &&
                ((ctx == ctx_cpu && !fp8) || (!poisoned && fabsf(p.softmax_scale) <= 1e6f)))
                for (int32_t d = 0; d < Dl; d++)
                    FUZZ_REQUIRE(mlav_load_as_f32(t.out, (int)p.dtype, k * (size_t)Dl + d) == 0.0f,
                                 "row %zu has lse -inf but a non-zero out", k);
        }
        /* differential: the cpu backend against the fp64 oracle, where the inputs are finite and
         * the scores moderate (the tolerance is then the DESIGN one, loosened for tiny rows) */
        if (ctx == ctx_cpu && !poisoned && !lying && !lied_tensors && amp <= 1.0f && t.lse) {
            guarded out2 = guarded_new(nout * esz), lse2 = guarded_new(nlse * sizeof(float));
            mlav_tensors t2 = t;
            t2.out = out2.p;
            t2.lse = lse2.p;
            mlav_status s2 = mlav_verify(ctx_ref, &p, &t2);
            FUZZ_REQUIRE(s2 == MLAV_OK, "the oracle refused what cpu ran: %s",
                         mlav_last_error(NULL));
            const float *l2 = (const float *)lse2.p;
            double num = 0.0, den = 0.0;
            for (size_t k = 0; k < nout; k++) {
                double a = mlav_load_as_f32(t.out, (int)p.dtype, k);
                double b = mlav_load_as_f32(out2.p, (int)p.dtype, k);
                FUZZ_REQUIRE(isnan(a) == isnan(b), "out[%zu]: cpu %g, oracle %g", k, a, b);
                if (!isnan(a)) {
                    num += (a - b) * (a - b);
                    den += b * b;
                }
            }
            double tol = p.dtype == MLAV_DTYPE_F32 ? 1e-4 : 1e-2;
            FUZZ_REQUIRE(num <= tol * tol * (den > 1e-6 * (double)nout ? den : 1e-6 * (double)nout),
                         "cpu out differs from the oracle: rel-L2 %g", sqrt(num / (den + 1e-30)));
            for (size_t k = 0; k < nlse; k++) {
                FUZZ_REQUIRE(isnan(l[k]) == isnan(l2[k]) &&
                                 (l[k] == -INFINITY) == (l2[k] == -INFINITY),
                             "lse[%zu]: cpu %g, oracle %g", k, (double)l[k], (double)l2[k]);
                if (isfinite(l2[k]))
                    FUZZ_REQUIRE(fabs((double)l[k] - (double)l2[k]) <= 1e-3,
                                 "lse[%zu]: cpu %g, oracle %g", k, (double)l[k], (double)l2[k]);
            }
            free(out2.alloc);
            free(lse2.alloc);
        }
    }
    free(q0);
    free(kv0);
    free(pt0);
    free(mask0);
    free(ws);
    free(out.alloc);
    free(lse.alloc);
    free(q);
    free(kv);
    free(pt);
    free(mask);
    mlav_plan_free(plan);
}

/* ---- the host helpers ------------------------------------------------------------------------ */

static void fuzz_tree(rd *r)
{
    const int32_t q_len = (int32_t)(u8(r) % 42) - 2;
    const int32_t words = (int32_t)(u8(r) % 4) - 1;
    const uint32_t f = u8(r);
    const size_t n = q_len > 0 ? (size_t)q_len : 1;
    int32_t *parents = malloc(sizeof(int32_t) * n), *draft = malloc(sizeof(int32_t) * n);
    int32_t *target = malloc(sizeof(int32_t) * n);
    FUZZ_REQUIRE(parents && draft && target, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint32_t v = u8(r);
        /* mostly a tree (parent before the node), sometimes anything */
        parents[i] = i == 0 ? -1 : (v & 0x80) ? (int32_t)(int8_t)u8(r) : (int32_t)(v % i);
        draft[i] = (int32_t)(u8(r) % 4);
        target[i] = (int32_t)(u8(r) % 4);
    }
    if (f & 1)
        parents[0] = (int32_t)(int8_t)u8(r);

    const size_t mask_n = (size_t)n * (size_t)(words > 0 ? words : 0);
    guarded mask = guarded_new(sizeof(uint32_t) * mask_n);
    mlav_status s = mlav_tree_mask_from_parents(q_len, (f & 2) ? NULL : parents, words,
                                                (f & 4) ? NULL : (uint32_t *)mask.p);
    FUZZ_REQUIRE(guarded_ok(&mask), "tree mask written out of bounds");
    if (s != MLAV_OK) {
        require_failure(s, "tree_mask_from_parents");
    } else {
        const uint32_t *m = mask.p;
        for (int32_t i = 0; i < q_len; i++) {
            const uint32_t *row = m + (size_t)i * (size_t)words;
            FUZZ_REQUIRE((row[i / 32] >> (i % 32)) & 1u, "node %d does not see itself", i);
            for (int32_t k = 0; k < 32 * words; k++)
                if ((row[k / 32] >> (k % 32)) & 1u)
                    FUZZ_REQUIRE(k <= i, "node %d sees node %d after it", i, k);
        }
    }

    guarded acc = guarded_new(sizeof(int32_t) * n);
    int32_t num = -7, bonus = -7;
    s = mlav_tree_accept_greedy(q_len, parents, draft, target, (int32_t *)acc.p,
                                (f & 8) ? NULL : &num, &bonus);
    FUZZ_REQUIRE(guarded_ok(&acc), "accepted path written out of bounds");
    if (s != MLAV_OK) {
        require_failure(s, "tree_accept_greedy");
    } else {
        const int32_t *a = acc.p;
        FUZZ_REQUIRE(num >= 1 && num <= q_len && a[0] == 0, "bad accepted path (length %d)", num);
        for (int32_t k = 1; k < q_len; k++)
            FUZZ_REQUIRE(k < num ? parents[a[k]] == a[k - 1] : a[k] == -1,
                         "accepted[%d] = %d is not a path", k, a[k]);
        FUZZ_REQUIRE(bonus == target[a[num - 1]], "bonus token %d", bonus);
    }
    int32_t w = mlav_tree_mask_words(lie(r));
    FUZZ_REQUIRE(w >= 1, "mlav_tree_mask_words gave %d", w);
    free(parents);
    free(draft);
    free(target);
    free(mask.alloc);
    free(acc.alloc);
}

static void fuzz_merge(rd *r)
{
    const int32_t n = (int32_t)(u8(r) % 6) - 1;
    const int64_t rows = (int64_t)(u8(r) % 7) - 1;
    const int32_t dim = (int32_t)(u8(r) % 9) - 1;
    const uint32_t f = u8(r);
    const size_t nr = rows > 0 ? (size_t)rows : 0, nd = dim > 0 ? (size_t)dim : 0;
    const size_t ns = n > 0 ? (size_t)n : 1;
    float **outs = calloc(ns, sizeof(float *)), **lses = calloc(ns, sizeof(float *));
    FUZZ_REQUIRE(outs && lses, "out of memory");
    static const float special[6] = {NAN, INFINITY, -INFINITY, 0.0f, 88.0f, -100.0f};
    for (size_t i = 0; i < ns; i++) {
        outs[i] = malloc(sizeof(float) * (nr * nd + 1));
        lses[i] = malloc(sizeof(float) * (nr + 1));
        FUZZ_REQUIRE(outs[i] && lses[i], "out of memory");
        for (size_t k = 0; k < nr * nd; k++)
            outs[i][k] = (float)((int32_t)u8(r) - 128) / 32.0f;
        for (size_t k = 0; k < nr; k++) {
            uint32_t v = u8(r);
            lses[i][k] = v < 6 * 8 ? special[v % 6] : (float)((int32_t)v - 150) / 8.0f;
        }
    }
    guarded out = guarded_new(sizeof(float) * nr * nd), lse = guarded_new(sizeof(float) * nr);
    float *o = out.p, *l = lse.p;
    if (f & 1) { /* in place, as the API allows */
        o = outs[0];
        l = lses[0];
    }
    mlav_status s = mlav_merge_states(n, rows, dim, (const float *const *)outs,
                                      (const float *const *)lses, (f & 2) ? NULL : o, l);
    FUZZ_REQUIRE(guarded_ok(&out) && guarded_ok(&lse), "merge wrote out of bounds");
    if (s != MLAV_OK)
        require_failure(s, "merge_states");
    for (size_t i = 0; i < ns; i++) {
        free(outs[i]);
        free(lses[i]);
    }
    free(outs);
    free(lses);
    free(out.alloc);
    free(lse.alloc);
}

static void fuzz_names(rd *r)
{
    char name[24];
    size_t n = u8(r) % sizeof name;
    for (size_t k = 0; k < n; k++)
        name[k] = (char)u8(r);
    name[n < sizeof name ? n : sizeof name - 1] = '\0';
    mlav_backend b = (mlav_backend)77;
    mlav_status s = mlav_backend_from_name(name, &b);
    FUZZ_REQUIRE(s == MLAV_OK ? strcmp(mlav_backend_name(b), name) == 0 : b == (mlav_backend)77,
                 "backend name '%s'", name);
    int32_t v = lie(r);
    FUZZ_REQUIRE(mlav_status_string((mlav_status)v) && mlav_backend_name((mlav_backend)v) &&
                     mlav_dtype_name((mlav_dtype)v),
                 "a NULL name");
    (void)mlav_dtype_size((mlav_dtype)v);
    mlav_context *ctx = NULL;
    s = mlav_context_create(&ctx, (mlav_backend)v);
    if (s == MLAV_OK) {
        FUZZ_REQUIRE(ctx && mlav_context_note(ctx), "a context without a note");
        mlav_context_free(ctx);
    } else {
        FUZZ_REQUIRE(ctx == NULL && mlav_last_error(NULL)[0], "context_create failed badly");
    }
}

/* ---- plans for limits: limits, then steps of lengths, on the CPU backends ------------------- */

static void fuzz_steps(rd *r)
{
    mlav_problem shape = {
        .num_heads = 1 + (int32_t)(u8(r) % 4), .d_latent = 1 + (int32_t)(u8(r) % 16),
        .d_rope = (int32_t)(u8(r) % 8), .softmax_scale = 0.25f, .dtype = (mlav_dtype)(u8(r) % 3),
        .page_size = 1 + (int32_t)(u8(r) % 8), .max_pages = u8(r) & 1 ? lie(r) : 1 + (int32_t)(u8(r) % 16)};
    /* an FP8 cache: bit 7 of a byte of its own; bits 0-2 the scale, bit 3 through kv_scale_ptr */
    const uint32_t k8 = u8(r);
    if (k8 & 0x80)
        shape.kv_dtype = MLAV_DTYPE_FP8_E4M3;
    float kv_scale = good_kv_scales[k8 % 8];
    const mlav_dtype kdt = k8 & 0x80 ? MLAV_DTYPE_FP8_E4M3 : shape.dtype;
    const size_t kv_esz = mlav_dtype_size(kdt);
    mlav_limits lim;
    if (u8(r) & 1) { /* anything */
        lim = (mlav_limits){lie(r), lie(r), lie(r), lie(r)};
    } else { /* mostly valid, small */
        lim.max_batch = 1 + (int32_t)(u8(r) % MAXB);
        lim.max_tokens = 1 + (int32_t)(u8(r) % 24);
        lim.max_q_len = 1 + (int32_t)(u8(r) % lim.max_tokens);
        lim.max_kv_len = lim.max_q_len + (int32_t)(u8(r) % 40);
    }
    mlav_context *const ctx = u8(r) & 1 ? ctx_cpu : ctx_ref;
    mlav_plan *plan = (mlav_plan *)&lim; /* must be reset */
    mlav_status s = mlav_plan_create_for_limits(ctx, &shape, &lim, &plan);
    if (s != MLAV_OK) {
        require_failure(s, "plan_create_for_limits");
        FUZZ_REQUIRE(plan == NULL, "a refused plan for limits was not reset to NULL");
        return;
    }
    /* A second plan of the same shape sharing the one workspace: its own small limits, or the
     * first's (another plan all the same). A workspace belongs to the plan whose update wrote it
     * last: the other's runs are refused (MLAV_ERR_WORKSPACE) and write nothing. */
    mlav_limits lim2 = lim;
    if (u8(r) & 1) {
        lim2.max_batch = 1 + (int32_t)(u8(r) % MAXB);
        lim2.max_tokens = 1 + (int32_t)(u8(r) % 24);
        lim2.max_q_len = 1 + (int32_t)(u8(r) % lim2.max_tokens);
        lim2.max_kv_len = lim2.max_q_len + (int32_t)(u8(r) % 40);
    }
    mlav_plan *plan2 = NULL;
    if (mlav_plan_create_for_limits(ctx, &shape, &lim2, &plan2) != MLAV_OK)
        plan2 = NULL;
    mlav_plan *const plans[2] = {plan, plan2};
    const mlav_limits lims[2] = {lim, lim2};
    mlav_limits big = lim;
    if (plan2) {
        big.max_batch = lim2.max_batch > big.max_batch ? lim2.max_batch : big.max_batch;
        big.max_tokens = lim2.max_tokens > big.max_tokens ? lim2.max_tokens : big.max_tokens;
        big.max_q_len = lim2.max_q_len > big.max_q_len ? lim2.max_q_len : big.max_q_len;
        big.max_kv_len = lim2.max_kv_len > big.max_kv_len ? lim2.max_kv_len : big.max_kv_len;
    }
    const int32_t H = shape.num_heads, W = shape.d_latent + shape.d_rope, P = shape.max_pages;
    const int64_t pool_rows = (int64_t)(1 + u8(r) % 8) * shape.page_size;
    if ((int64_t)big.max_tokens * H * W > MAX_Q_ELEMS || pool_rows * W > MAX_POOL_ELEMS ||
        (int64_t)big.max_batch * P > MAX_TABLE ||
        (double)big.max_tokens * H * big.max_kv_len * W > MAX_WORK) {
        mlav_plan_free(plan);
        mlav_plan_free(plan2);
        return;
    }
    const size_t esz = mlav_dtype_size(shape.dtype);
    const size_t q_elems = (size_t)big.max_tokens * H * W;
    size_t wsb = mlav_plan_workspace_bytes(plan);
    if (plan2 && mlav_plan_workspace_bytes(plan2) > wsb)
        wsb = mlav_plan_workspace_bytes(plan2);
    void *ws = NULL;
    FUZZ_REQUIRE(posix_memalign(&ws, 256, wsb ? wsb : 256) == 0, "out of memory");
    memset(ws, 0xff, wsb); /* NaN poison */
    uint64_t x = u32(r);
    void *q = malloc(q_elems * esz), *kv = malloc((size_t)pool_rows * W * kv_esz);
    int32_t *pt = malloc(sizeof(int32_t) * (size_t)big.max_batch * P);
    const size_t big_words = (size_t)mlav_tree_mask_words(big.max_q_len);
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)big.max_tokens * big_words);
    FUZZ_REQUIRE(q && kv && pt && mask, "out of memory");
    for (size_t k = 0; k < q_elems; k++)
        mlav_store_from_f32(q, (int)shape.dtype, k, uniform(&x));
    for (size_t k = 0; k < (size_t)pool_rows * W; k++)
        store_kv(kv, kdt, k, uniform(&x), kv_scale);
    for (size_t k = 0; k < (size_t)big.max_batch * P; k++)
        pt[k] = u8(r) & 7 ? (int32_t)(mix(&x) % (uint64_t)(pool_rows / shape.page_size)) : lie(r);
    /* each plan's outputs of exactly its limits' sizes, guarded */
    guarded outs[2], lses[2];
    for (int k = 0; k < 2; k++) {
        outs[k] = guarded_new((size_t)lims[k].max_tokens * H * shape.d_latent * esz);
        lses[k] = guarded_new(sizeof(float) * (size_t)lims[k].max_tokens * H);
    }
    int owner = -1; /* the plan whose update wrote the workspace last */
    int32_t owner_T = 0;
    for (int step = 0; step < 4; step++) {
        const int up = plan2 && (u8(r) & 1), run = plan2 && (u8(r) & 1);
        const mlav_limits *lu = &lims[up], *lr = &lims[run];
        if (u8(r) % 4) {
            int32_t qi[MAXB + 2] = {0}, kvl[MAXB + 1] = {0};
            mlav_lengths len = {MLAV_MEM_HOST, (int32_t)(u8(r) % (MAXB + 2)) - (int32_t)(u8(r) % 2), qi, kvl};
            for (int b = 0; b <= MAXB; b++) {
                /* wrapping on purpose (unsigned): a liar's lengths overflow as they like */
                const uint32_t d = u8(r) & 3 ? u8(r) % 4 : (uint32_t)lie(r);
                qi[b + 1] = (int32_t)((uint32_t)qi[b] + d);
                kvl[b] = u8(r) & 3 ? (int32_t)(d + u8(r) % 40) : lie(r);
            }
            if (len.batch > MAXB)
                len.batch = MAXB; /* qi holds MAXB + 1 entries past 0; larger batches are refused
                                     before any read (checked against max_batch <= MAXB first) */
            s = mlav_plan_update(plans[up], &len, ws, u8(r) % 16 ? wsb : wsb / 2, NULL);
            if (s != MLAV_OK) {
                require_failure(s, "plan_update"); /* the last good step stays */
            } else {
                /* the lengths were taken: every request fits the limits */
                owner = up;
                owner_T = qi[len.batch];
                FUZZ_REQUIRE(owner_T >= 0 && owner_T <= lu->max_tokens,
                             "update took %d tokens past %d", owner_T, lu->max_tokens);
            }
        }
        const size_t words = (size_t)mlav_tree_mask_words(lr->max_q_len);
        const size_t out_elems = (size_t)lr->max_tokens * H * shape.d_latent;
        poison(outs[run].p, out_elems, esz);
        poison(lses[run].p, (size_t)lr->max_tokens * H, sizeof(float));
        memset(mask, 0, sizeof(uint32_t) * (size_t)big.max_tokens * big_words);
        for (int32_t t = 0; t < lr->max_tokens; t++) /* causal-chain bits of the runner's rows */
            mask[(size_t)t * words] = 1u;
        mlav_tensors t = {.memory = MLAV_MEM_HOST, .q = q, .kv_cache = kv,
                          .num_pages = pool_rows / shape.page_size, .page_table = pt,
                          .tree_mask = u8(r) & 1 ? mask : NULL, .out = outs[run].p,
                          .lse = lses[run].p, .kv_scale = (k8 & 8) ? 0.0f : kv_scale,
                          .kv_scale_ptr = (k8 & 8) ? &kv_scale : NULL};
        s = mlav_run(plans[run], &t, ws, wsb, NULL);
        FUZZ_REQUIRE(guarded_ok(&outs[run]) && guarded_ok(&lses[run]),
                     "a run of a plan for limits wrote past out or lse");
        const mlav_status ss = mlav_plan_step_status(plans[run], ws, wsb, NULL, NULL);
        if (owner != run) {
            FUZZ_REQUIRE(s == MLAV_ERR_WORKSPACE && ss == MLAV_ERR_WORKSPACE,
                         "plan %d on a workspace %s: run %s, step_status %s", run,
                         owner < 0 ? "no update wrote" : "the other plan's update wrote",
                         mlav_status_string(s), mlav_status_string(ss));
            require_failure(s, "run on another plan's workspace");
            FUZZ_REQUIRE(all_poison(outs[run].p, out_elems, esz) &&
                             all_poison(lses[run].p, (size_t)lr->max_tokens * H, sizeof(float)),
                         "a run on another plan's workspace wrote out or lse");
            continue;
        }
        FUZZ_REQUIRE(ss == MLAV_OK, "step_status of the owner's step: %s", mlav_status_string(ss));
        if (s != MLAV_OK) {
            require_failure(s, "run of a plan for limits");
            continue;
        }
        const int32_t T = owner_T;
        FUZZ_REQUIRE(all_poison((char *)outs[run].p + (size_t)T * H * shape.d_latent * esz,
                                out_elems - (size_t)T * H * shape.d_latent, esz),
                     "a run wrote rows past the step's %d tokens", T);
        for (size_t k = 0; k < (size_t)T * H * shape.d_latent; k++)
            FUZZ_REQUIRE(!is_poison(outs[run].p, k, esz), "out[%zu] of the step was not written", k);
    }
    for (int k = 0; k < 2; k++) {
        free(outs[k].alloc);
        free(lses[k].alloc);
    }
    free(q);
    free(kv);
    free(pt);
    free(mask);
    free(ws);
    mlav_plan_free(plan);
    mlav_plan_free(plan2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!ctx_cpu)
        LLVMFuzzerInitialize(NULL, NULL);
    rd r = {data, size};
    switch (u8(&r) % 8) {
    case 0:
    case 1:
    case 2: fuzz_problem(&r, 0); break;
    case 3:
    case 4: fuzz_problem(&r, 1); break;
    case 5: fuzz_tree(&r); break;
    case 6: fuzz_merge(&r); break;
    default:
        if (u8(&r) & 1)
            fuzz_names(&r);
        else
            fuzz_steps(&r);
        break;
    }
    return 0;
}
