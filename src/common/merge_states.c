/* The public merges of attention states (mlav_merge_states, mlav_merge_states_stacked,
 * mlav_merge_state_in_place): their argument checks, written once for every form; the host
 * loop, on the one copy of the merge math (merge.h) and of the dtype conversions (dtype.h); and
 * the hand-off of device memory to the CUDA kernel (src/cuda/merge_states.cu). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../core/problem.h"
#include "dtype.h"
#include "merge.h"
#include "merge_states.h"

/* A byte range an argument covers, for the overlap rules. */
typedef struct span {
    const char *name;
    uintptr_t lo, hi;
} span;

static span span_of(const char *name, const void *p, size_t bytes)
{
    span s = {name, (uintptr_t)p, (uintptr_t)p + bytes};
    return s;
}

static int spans_overlap(span a, span b)
{
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* An output span may share bytes with an input span only when both start at the same address
 * and the output is no longer than the input (out over the first state: each element and each
 * row's lse is read before it is written, on host and device alike). */
static mlav_status check_apart(const char *fn, span out, span in, int may_equal)
{
    if (!spans_overlap(out, in))
        return MLAV_OK;
    if (may_equal && out.lo == in.lo && out.hi <= in.hi)
        return MLAV_OK;
    return mlav_set_error(MLAV_ERR_INVALID_ARG,
                          "%s: %s [%p, %p) overlaps %s [%p, %p)%s", fn, out.name,
                          (void *)out.lo, (void *)out.hi, in.name, (void *)in.lo, (void *)in.hi,
                          may_equal ? " (it may only be exactly the first state)" : "");
}

static mlav_status check_pointer(const char *fn, const void *p, const char *name, size_t align)
{
    if (!p)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
    if ((uintptr_t)p % align)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "%s: %s = %p is not %zu-byte aligned", fn,
                              name, p, align);
    return MLAV_OK;
}

/* The counts and sizes of a merge of n states of [rows, dim] dtype: the element size in *es, and
 * the bytes of one state's o and lse (which n of them must fit in the address space). */
static mlav_status check_shape(const char *fn, mlav_dtype dtype, int32_t n, int64_t rows,
                               int32_t dim, size_t *es, size_t *o_bytes, size_t *l_bytes)
{
    if (dtype != MLAV_DTYPE_F32 && dtype != MLAV_DTYPE_BF16 && dtype != MLAV_DTYPE_F16)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: dtype = %d (%s) is not F32, BF16 or F16 (the dtypes of an "
                              "attention output)",
                              fn, (int)dtype, mlav_dtype_name(dtype));
    if (n < 1 || n > MLAV_MERGE_MAX_STATES)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "%s: num_states = %d is outside [1, %d]", fn,
                              n, MLAV_MERGE_MAX_STATES);
    if (rows < 0 || dim < 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "%s: rows = %lld and dim = %d must be >= 0",
                              fn, (long long)rows, dim);
    *es = mlav_dtype_size(dtype);
    const size_t per_row = (size_t)n * ((size_t)dim * *es > 4 ? (size_t)dim * *es : 4);
    if ((uint64_t)rows > (uint64_t)(PTRDIFF_MAX / 2) / per_row)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: %d states of %lld rows x %d %s elements do not fit the "
                              "address space",
                              fn, n, (long long)rows, dim, mlav_dtype_name(dtype));
    *o_bytes = (size_t)rows * (size_t)dim * *es;
    *l_bytes = (size_t)rows * sizeof(float);
    return MLAV_OK;
}

static mlav_status check_memory(const char *fn, mlav_memory memory)
{
    if (memory != MLAV_MEM_HOST && memory != MLAV_MEM_DEVICE)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: memory = %d is neither MLAV_MEM_HOST nor MLAV_MEM_DEVICE", fn,
                              (int)memory);
    return MLAV_OK;
}

/* The host merge: state i's o at outs[i], lse at lses[i]. Element by element, every input of an
 * element (and of a row's lse) read before it is written, so out may be outs[0]. */
static mlav_status merge_host(int32_t n, int64_t rows, int32_t dim, mlav_dtype dtype,
                              const void *const *outs, const float *const *lses, void *out,
                              float *lse)
{
    const int dt = (int)dtype;
    float stack_l[64], stack_w[64];
    float *l = stack_l, *w = stack_w;
    if (n > 64) {
        l = malloc(sizeof(float) * 2 * (size_t)n);
        if (!l)
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory merging states");
        w = l + n;
    }
    for (int64_t r = 0; r < rows; r++) {
        for (int32_t i = 0; i < n; i++)
            l[i] = lses[i][r];
        const float merged = mlav_merge_weights(n, l, w);
        for (int32_t d = 0; d < dim; d++) {
            const size_t k = (size_t)r * (size_t)dim + (size_t)d;
            float acc = 0.0f;
            for (int32_t i = 0; i < n; i++)
                if (w[i] != 0.0f || w[i] != w[i]) /* an empty state's o is not read: 0*NaN */
                    acc += w[i] * mlav_load_as_f32(outs[i], dt, k);
            mlav_store_from_f32(out, dt, k, acc);
        }
        if (lse)
            lse[r] = merged;
    }
    if (l != stack_l)
        free(l);
    return MLAV_OK;
}

/* The device merge, or the sentence of a build without CUDA. */
static mlav_status merge_device(const char *fn, const mlav_merge_job *job,
                                const void *const *pointers, const char *const *names, int count,
                                void *stream)
{
#ifdef MLAV_WITH_CUDA
    return mlav_cuda_merge_states(fn, job, pointers, names, count, stream);
#else
    (void)job, (void)pointers, (void)names, (void)count, (void)stream;
    return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                          "%s: memory is MLAV_MEM_DEVICE, but this library was built without "
                          "CUDA (merge host memory, or build with MLAV_CUDA=ON)",
                          fn);
#endif
}

mlav_status mlav_merge_states(int32_t num_states, int64_t rows, int32_t dim,
                              const float *const *outs, const float *const *lses, float *out,
                              float *lse)
{
    static const char fn[] = "mlav_merge_states";
    size_t es = 1, ob = 0, lb = 0;
    mlav_status st = check_shape(fn, MLAV_DTYPE_F32, num_states, rows, dim, &es, &ob, &lb);
    if (st != MLAV_OK)
        return st;
    if (!outs || !lses || !out || !lse)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "%s: outs, lses, out and lse must not be NULL", fn);
    for (int32_t i = 0; i < num_states; i++)
        if (!outs[i] || !lses[i])
            return mlav_set_error(MLAV_ERR_INVALID_ARG, "%s: outs[%d] or lses[%d] is NULL", fn,
                                  i, i);
    if ((st = check_pointer(fn, out, "out", 4)) != MLAV_OK ||
        (st = check_pointer(fn, lse, "lse", 4)) != MLAV_OK)
        return st;
    const span so = span_of("out", out, ob), sl = span_of("lse", lse, lb);
    if ((st = check_apart(fn, so, sl, 0)) != MLAV_OK)
        return st;
    for (int32_t i = 0; i < num_states; i++) {
        if ((st = check_pointer(fn, outs[i], "outs[i]", 4)) != MLAV_OK ||
            (st = check_pointer(fn, lses[i], "lses[i]", 4)) != MLAV_OK)
            return st;
        char on[24], ln[24];
        span oi = span_of("outs[i]", outs[i], ob), li = span_of("lses[i]", lses[i], lb);
        if (spans_overlap(so, oi) || spans_overlap(so, li) || spans_overlap(sl, li) ||
            spans_overlap(sl, oi)) { /* named only when a sentence may need it */
            snprintf(on, sizeof on, "outs[%d]", i);
            snprintf(ln, sizeof ln, "lses[%d]", i);
            oi.name = on;
            li.name = ln;
        }
        if ((st = check_apart(fn, so, oi, i == 0)) != MLAV_OK ||
            (st = check_apart(fn, so, li, 0)) != MLAV_OK ||
            (st = check_apart(fn, sl, li, i == 0)) != MLAV_OK ||
            (st = check_apart(fn, sl, oi, 0)) != MLAV_OK)
            return st;
    }
    return merge_host(num_states, rows, dim, MLAV_DTYPE_F32, (const void *const *)outs, lses,
                      out, lse);
}

mlav_status mlav_merge_states_stacked(mlav_memory memory, mlav_dtype dtype, int32_t num_states,
                                      int64_t rows, int32_t dim, const void *outs,
                                      const float *lses, void *out, float *lse, void *stream)
{
    static const char fn[] = "mlav_merge_states_stacked";
    size_t es = 1, ob = 0, lb = 0;
    mlav_status st = check_memory(fn, memory);
    if (st == MLAV_OK)
        st = check_shape(fn, dtype, num_states, rows, dim, &es, &ob, &lb);
    if (st != MLAV_OK)
        return st;
    if ((st = check_pointer(fn, outs, "outs", es)) != MLAV_OK ||
        (st = check_pointer(fn, lses, "lses", 4)) != MLAV_OK ||
        (st = check_pointer(fn, out, "out", es)) != MLAV_OK ||
        (lse && (st = check_pointer(fn, lse, "lse", 4)) != MLAV_OK))
        return st;
    const span so = span_of("out", out, ob), sl = span_of("lse", lse, lse ? lb : 0);
    const span si = span_of("outs", outs, ob * (size_t)num_states);
    const span sj = span_of("lses", lses, lb * (size_t)num_states);
    if ((st = check_apart(fn, so, si, 1)) != MLAV_OK ||
        (st = check_apart(fn, so, sj, 0)) != MLAV_OK ||
        (st = check_apart(fn, sl, sj, 1)) != MLAV_OK ||
        (st = check_apart(fn, sl, si, 0)) != MLAV_OK || (st = check_apart(fn, so, sl, 0)) != MLAV_OK)
        return st;

    const size_t o_step = ob / es, l_step = (size_t)rows;
    const mlav_merge_job job = {dtype, num_states, rows, dim,
                                outs, (const char *)outs + ob, o_step,
                                lses, lses + l_step, l_step, out, lse};
    if (memory == MLAV_MEM_DEVICE) {
        const void *ptrs[4] = {outs, lses, out, lse};
        const char *names[4] = {"outs", "lses", "out", "lse"};
        return merge_device(fn, &job, ptrs, names, lse ? 4 : 3, stream);
    }
    if (rows == 0)
        return MLAV_OK;
    const void *stack_o[64] = {0};
    const float *stack_l[64] = {0};
    const void **po = stack_o;
    const float **pl = stack_l;
    if (num_states > 64) {
        po = malloc(sizeof(void *) * (size_t)num_states);
        pl = malloc(sizeof(float *) * (size_t)num_states);
        if (!po || !pl) {
            free(po);
            free(pl);
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY, "out of host memory merging states");
        }
    }
    for (int32_t i = 0; i < num_states; i++) {
        po[i] = (const char *)outs + (size_t)i * ob;
        pl[i] = lses + (size_t)i * l_step;
    }
    st = merge_host(num_states, rows, dim, dtype, po, pl, out, lse);
    if (po != stack_o) {
        free(po);
        free(pl);
    }
    return st;
}

mlav_status mlav_merge_state_in_place(mlav_memory memory, mlav_dtype dtype, int64_t rows,
                                      int32_t dim, void *out, float *lse, const void *other_out,
                                      const float *other_lse, void *stream)
{
    static const char fn[] = "mlav_merge_state_in_place";
    size_t es = 1, ob = 0, lb = 0;
    mlav_status st = check_memory(fn, memory);
    if (st == MLAV_OK)
        st = check_shape(fn, dtype, 2, rows, dim, &es, &ob, &lb);
    if (st != MLAV_OK)
        return st;
    if ((st = check_pointer(fn, out, "out", es)) != MLAV_OK ||
        (st = check_pointer(fn, lse, "lse", 4)) != MLAV_OK ||
        (st = check_pointer(fn, other_out, "other_out", es)) != MLAV_OK ||
        (st = check_pointer(fn, other_lse, "other_lse", 4)) != MLAV_OK)
        return st;
    const span so = span_of("out", out, ob), sl = span_of("lse", lse, lb);
    const span bo = span_of("other_out", other_out, ob), bl = span_of("other_lse", other_lse, lb);
    if ((st = check_apart(fn, so, sl, 0)) != MLAV_OK ||
        (st = check_apart(fn, so, bo, 0)) != MLAV_OK ||
        (st = check_apart(fn, so, bl, 0)) != MLAV_OK ||
        (st = check_apart(fn, sl, bo, 0)) != MLAV_OK || (st = check_apart(fn, sl, bl, 0)) != MLAV_OK)
        return st;

    const mlav_merge_job job = {dtype, 2, rows, dim, out, other_out, 0, lse, other_lse, 0,
                                out, lse};
    if (memory == MLAV_MEM_DEVICE) {
        const void *ptrs[4] = {out, lse, other_out, other_lse};
        const char *names[4] = {"out", "lse", "other_out", "other_lse"};
        return merge_device(fn, &job, ptrs, names, 4, stream);
    }
    const void *po[2] = {out, other_out};
    const float *pl[2] = {lse, other_lse};
    return merge_host(2, rows, dim, dtype, po, pl, out, lse);
}

int mlav_nccl_compiled(void)
{
#if defined(MLAV_WITH_NCCL) && defined(MLAV_WITH_CUDA)
    return 1;
#else
    return 0;
#endif
}

mlav_status mlav_cp_merge_states(void *comm, mlav_dtype dtype, int64_t rows, int32_t dim,
                                 const void *out_local, const float *lse_local,
                                 void *gathered_out, float *gathered_lse, void *out, float *lse,
                                 void *stream)
{
    static const char fn[] = "mlav_cp_merge_states";
#if defined(MLAV_WITH_NCCL) && defined(MLAV_WITH_CUDA)
    if (!comm)
        return mlav_set_error(MLAV_ERR_INVALID_ARG, "%s: comm is NULL", fn);
    int ranks = 0;
    mlav_status st = mlav_nccl_ranks(fn, comm, &ranks);
    size_t es = 1, ob = 0, lb = 0;
    if (st == MLAV_OK)
        st = check_shape(fn, dtype, ranks, rows, dim, &es, &ob, &lb);
    if (st != MLAV_OK)
        return st;
    if ((st = check_pointer(fn, out_local, "out_local", es)) != MLAV_OK ||
        (st = check_pointer(fn, lse_local, "lse_local", 4)) != MLAV_OK ||
        (st = check_pointer(fn, gathered_out, "gathered_out", es)) != MLAV_OK ||
        (st = check_pointer(fn, gathered_lse, "gathered_lse", 4)) != MLAV_OK ||
        (st = check_pointer(fn, out, "out", es)) != MLAV_OK ||
        (lse && (st = check_pointer(fn, lse, "lse", 4)) != MLAV_OK))
        return st;
    const span sol = span_of("out_local", out_local, ob), sll = span_of("lse_local", lse_local, lb);
    const span sgo = span_of("gathered_out", gathered_out, ob * (size_t)ranks);
    const span sgl = span_of("gathered_lse", gathered_lse, lb * (size_t)ranks);
    const span so = span_of("out", out, ob), sl = span_of("lse", lse, lse ? lb : 0);
    /* the all-gather writes the scratch while it reads the local state; the merge then reads only
     * the scratch, so out may be the local state itself */
    if ((st = check_apart(fn, sgo, sol, 0)) != MLAV_OK ||
        (st = check_apart(fn, sgo, sll, 0)) != MLAV_OK ||
        (st = check_apart(fn, sgo, sgl, 0)) != MLAV_OK ||
        (st = check_apart(fn, sgl, sol, 0)) != MLAV_OK ||
        (st = check_apart(fn, sgl, sll, 0)) != MLAV_OK ||
        (st = check_apart(fn, so, sgo, 0)) != MLAV_OK ||
        (st = check_apart(fn, so, sgl, 0)) != MLAV_OK ||
        (st = check_apart(fn, sl, sgo, 0)) != MLAV_OK ||
        (st = check_apart(fn, sl, sgl, 0)) != MLAV_OK ||
        (st = check_apart(fn, so, sol, 1)) != MLAV_OK ||
        (st = check_apart(fn, so, sll, 0)) != MLAV_OK ||
        (st = check_apart(fn, sl, sll, 1)) != MLAV_OK ||
        (st = check_apart(fn, sl, sol, 0)) != MLAV_OK || (st = check_apart(fn, so, sl, 0)) != MLAV_OK)
        return st;
    const void *ptrs[6] = {out_local, lse_local, gathered_out, gathered_lse, out, lse};
    const char *names[6] = {"out_local", "lse_local", "gathered_out", "gathered_lse", "out", "lse"};
    if ((st = mlav_cuda_check_device_pointers(fn, ptrs, names, lse ? 6 : 5)) != MLAV_OK)
        return st;
    if (rows == 0)
        return MLAV_OK;
    if ((st = mlav_nccl_gather_states(fn, comm, ob, out_local, gathered_out, lb, lse_local,
                                      gathered_lse, stream)) != MLAV_OK)
        return st;
    const mlav_merge_job job = {dtype,        ranks,
                                rows,         dim,
                                gathered_out, (const char *)gathered_out + ob,
                                ob / es,      gathered_lse,
                                gathered_lse + rows, (size_t)rows,
                                out,          lse};
    return merge_device(fn, &job, NULL, NULL, 0, stream);
#else
    (void)comm, (void)dtype, (void)rows, (void)dim, (void)out_local, (void)lse_local;
    (void)gathered_out, (void)gathered_lse, (void)out, (void)lse, (void)stream;
    return mlav_set_error(MLAV_ERR_UNSUPPORTED,
                          "%s: this library was built without NCCL (configure it with CUDA and "
                          "MLAV_NCCL=ON, NCCL_ROOT naming where nccl.h and libnccl are)",
                          fn);
#endif
}
