/* The common `run` of the CUDA backends: residency and alignment checks for device tensors, and
 * the offload mapping (allocate, copy in, run, copy back, free) for host tensors. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_offload.h"

#include "../common/shard.h"

/* Is `ptr` memory the kernels of the current device may read? Device memory of this device or
 * managed memory: anything else (pageable or pinned host memory, another GPU's memory) would
 * fault inside a kernel, and a fault poisons the whole CUDA context of the caller's process. */
static mlav_status check_device_pointer(const void *ptr, const char *name, size_t align,
                                        int device)
{
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, ptr);
    if (e == cudaErrorInvalidValue) {
        (void)cudaGetLastError();
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "tensors.%s = %p is not a pointer CUDA knows, but tensors.memory "
                              "is MLAV_MEM_DEVICE",
                              name, ptr);
    }
    if (e != cudaSuccess)
        return mlav_cuda_error(e, "cudaPointerGetAttributes", __FILE__, __LINE__);
    if (a.type == cudaMemoryTypeDevice) {
        if (a.device != device)
            return mlav_set_error(MLAV_ERR_INVALID_ARG,
                                  "tensors.%s = %p is memory of CUDA device %d, but device %d "
                                  "is current",
                                  name, ptr, a.device, device);
    } else if (a.type != cudaMemoryTypeManaged) {
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "tensors.%s = %p is %s memory, but tensors.memory is "
                              "MLAV_MEM_DEVICE (pass MLAV_MEM_HOST to have it mapped)",
                              name, ptr,
                              a.type == cudaMemoryTypeHost ? "pinned host" : "ordinary host");
    }
    if ((uintptr_t)ptr % align != 0)
        return mlav_set_error(MLAV_ERR_INVALID_ARG,
                              "tensors.%s = %p is not %zu-byte aligned (device tensors must be)",
                              name, ptr, align);
    return MLAV_OK;
}

static mlav_status check_device_tensors(const mlav_problem_info *p, const mlav_tensors *t,
                                        int device)
{
    /* Dispatch already rejected NULL where a pointer is needed; a NULL here is an unused one
     * (kv_cache and page_table when no request has KV rows, tree_mask, lse, kv_scale_ptr: the
     * host kv_scale then). kv_scale_ptr is read by the kernels of an FP8 cache only. */
    const bool fp8 = p->kv_dtype == MLAV_DTYPE_FP8_E4M3;
    struct {
        const void *ptr;
        const char *name;
        size_t align;
    } const list[] = {
        {t->q, "q", 16},
        {t->kv_cache, "kv_cache", 16},
        {t->page_table, "page_table", 4},
        {t->page_table_rows, "page_table_rows", 4},
        {t->tree_mask, "tree_mask", 4},
        {t->out, "out", 16},
        {t->lse, "lse", 4},
        {fp8 ? t->kv_scale_ptr : NULL, "kv_scale_ptr", 4},
    };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        if (!list[i].ptr)
            continue;
        mlav_status s = check_device_pointer(list[i].ptr, list[i].name, list[i].align, device);
        if (s != MLAV_OK)
            return s;
    }
    return MLAV_OK;
}

/* The workspace lives on the device in both modes: a host buffer would fault in a kernel. */
static mlav_status check_workspace(const void *workspace, size_t workspace_bytes, int device)
{
    if (!workspace || workspace_bytes == 0)
        return MLAV_OK;
    cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, workspace);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        a.type = cudaMemoryTypeUnregistered;
    }
    if (a.type == cudaMemoryTypeManaged || (a.type == cudaMemoryTypeDevice && a.device == device))
        return MLAV_OK;
    return mlav_set_error(MLAV_ERR_WORKSPACE,
                          "workspace %p is not device memory of the current device %d (a CUDA "
                          "plan's workspace must be, see mlav_plan_workspace_memory)",
                          workspace, device);
}

static size_t round_up_256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Offload mode: one device allocation holds every mapped tensor (one failure point, one free). */
static mlav_status run_offload(const mlav_problem_info *p, const void *state,
                               const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                               cudaStream_t stream, mlav_cuda_run_fn fn)
{
    const size_t esz = mlav_dtype_size(p->dtype), kv_esz = mlav_dtype_size(p->kv_dtype);
    const size_t rows = (size_t)p->T * (size_t)p->H;
    const size_t q_bytes = rows * (size_t)p->W * esz;
    const size_t kv_bytes =
        t->kv_cache ? (size_t)t->num_pages * (size_t)p->page_size * (size_t)p->W * kv_esz : 0;
    const size_t pt_bytes =
        t->page_table ? (size_t)p->B * (size_t)p->max_pages * sizeof(int32_t) : 0;
    const size_t mask_bytes =
        t->tree_mask ? (size_t)p->T * (size_t)p->mask_words * sizeof(uint32_t) : 0;
    const size_t out_bytes = rows * (size_t)p->Dl * esz;
    const size_t lse_bytes = t->lse ? rows * sizeof(float) : 0;

    const size_t off_q = 0;
    const size_t off_kv = off_q + round_up_256(q_bytes);
    const size_t off_pt = off_kv + round_up_256(kv_bytes);
    const size_t off_mask = off_pt + round_up_256(pt_bytes);
    const size_t off_out = off_mask + round_up_256(mask_bytes);
    const size_t off_lse = off_out + round_up_256(out_bytes);
    const size_t total = off_lse + round_up_256(lse_bytes);

    /* An FP8 scale of host tensors is host memory: read and checked here, and handed on as a
     * value (nothing to map; the kernels read a kv_scale_ptr only when it is device memory) */
    float kv_scale = 1.0f;
    mlav_status s = mlav_kv_scale_host(p, t, &kv_scale);
    if (s != MLAV_OK)
        return s;

    /* A table shared by every request (page_table_rows) is mapped as the requests' own rows,
     * gathered on the host (validation checked the indices of the requests that have KV rows),
     * so the copy is B rows, never the whole shared table. */
    int32_t *pt_gather = NULL;
    if (pt_bytes && t->page_table_rows) {
        pt_gather = (int32_t *)malloc(pt_bytes);
        if (!pt_gather)
            return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                                  "could not allocate %zu bytes to gather the page-table rows",
                                  pt_bytes);
        for (int32_t b = 0; b < p->B; b++) {
            int32_t *dst = pt_gather + (size_t)b * (size_t)p->max_pages;
            if (mlav_shard_rows(p->shard, p->kv_lens[b]) > 0) /* rows it reads: checked */
                memcpy(dst, mlav_page_row(p, t, b), (size_t)p->max_pages * sizeof(int32_t));
            else
                memset(dst, 0, (size_t)p->max_pages * sizeof(int32_t));
        }
    }

    char *base = NULL;
    cudaError_t e = cudaMalloc((void **)&base, total);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        free(pt_gather);
        return mlav_set_error(MLAV_ERR_OUT_OF_MEMORY,
                              "could not allocate %zu bytes of device memory to map the host "
                              "tensors (kv_cache alone is %zu bytes; pass device tensors to "
                              "avoid the copy)",
                              total, kv_bytes);
    }
    if (e != cudaSuccess) {
        free(pt_gather);
        return mlav_cuda_error(e, "cudaMalloc(mapped tensors)", __FILE__, __LINE__);
    }

    mlav_tensors d = *t;
    d.memory = MLAV_MEM_DEVICE;
    d.q = q_bytes ? base + off_q : NULL;
    d.kv_cache = kv_bytes ? base + off_kv : NULL;
    d.page_table = pt_bytes ? (const int32_t *)(const void *)(base + off_pt) : NULL;
    d.page_table_rows = NULL; /* gathered above: row b is request b's */
    d.page_table_num_rows = 0;
    d.tree_mask = mask_bytes ? (const uint32_t *)(const void *)(base + off_mask) : NULL;
    d.out = out_bytes ? base + off_out : NULL;
    d.lse = lse_bytes ? (float *)(void *)(base + off_lse) : NULL;
    d.kv_scale = kv_scale;
    d.kv_scale_ptr = NULL;

    /* Each step runs only if every one before it succeeded; the first failure's sentence is
     * kept, and the allocation is freed on every path. */
#define MLAV_STEP(call)                                                                      \
    do {                                                                                     \
        if (s == MLAV_OK) {                                                                  \
            cudaError_t step_e_ = (call);                                                    \
            if (step_e_ != cudaSuccess)                                                      \
                s = mlav_cuda_error(step_e_, #call, __FILE__, __LINE__);                     \
        }                                                                                    \
    } while (0)
    if (q_bytes)
        MLAV_STEP(cudaMemcpyAsync(base + off_q, t->q, q_bytes, cudaMemcpyHostToDevice, stream));
    if (kv_bytes)
        MLAV_STEP(cudaMemcpyAsync(base + off_kv, t->kv_cache, kv_bytes, cudaMemcpyHostToDevice,
                                  stream));
    if (pt_bytes)
        MLAV_STEP(cudaMemcpyAsync(base + off_pt, pt_gather ? pt_gather : t->page_table,
                                  pt_bytes, cudaMemcpyHostToDevice, stream));
    if (mask_bytes)
        MLAV_STEP(cudaMemcpyAsync(base + off_mask, t->tree_mask, mask_bytes,
                                  cudaMemcpyHostToDevice, stream));
    if (s == MLAV_OK)
        s = fn(p, state, &d, workspace, workspace_bytes, stream);
    if (out_bytes)
        MLAV_STEP(cudaMemcpyAsync(t->out, d.out, out_bytes, cudaMemcpyDeviceToHost, stream));
    if (lse_bytes)
        MLAV_STEP(cudaMemcpyAsync(t->lse, d.lse, lse_bytes, cudaMemcpyDeviceToHost, stream));
    MLAV_STEP(cudaStreamSynchronize(stream));
#undef MLAV_STEP
    if (s != MLAV_OK) {
        /* Work may still be queued on the stream after a failure: drain it before the free so
         * that no copy or kernel touches freed memory (its own error is not the first one). */
        if (cudaStreamSynchronize(stream) != cudaSuccess)
            (void)cudaGetLastError();
    }
    free(pt_gather); /* the stream was synchronized above: its copy has run */
    e = cudaFree(base);
    if (e != cudaSuccess && s == MLAV_OK)
        s = mlav_cuda_error(e, "cudaFree(mapped tensors)", __FILE__, __LINE__);
    else if (e != cudaSuccess)
        (void)cudaGetLastError();
    return s;
}

extern "C" mlav_status mlav_cuda_check_plan_device(const char *backend, int plan_device,
                                                   int current_device)
{
    if (current_device == plan_device)
        return MLAV_OK;
    return mlav_set_error(MLAV_ERR_INVALID_ARG,
                          "%s plan made on device %d, current device is %d: a plan runs on the "
                          "CUDA device it was made on (its tables live in that device's memory); "
                          "cudaSetDevice(%d) before mlav_run, or make a plan on device %d",
                          backend, plan_device, current_device, plan_device, current_device);
}

mlav_status mlav_cuda_run_mapped(const mlav_problem_info *p, const void *state,
                                 const mlav_tensors *t, void *workspace, size_t workspace_bytes,
                                 void *stream, mlav_cuda_run_fn fn, int plan_device,
                                 const char *backend)
{
    int device = 0;
    MLAV_CUDA_TRY(cudaGetDevice(&device));
    mlav_status s = mlav_cuda_check_plan_device(backend, plan_device, device);
    if (s != MLAV_OK)
        return s;
    if (p->T == 0)
        return MLAV_OK; /* no query row: nothing to read, nothing to write */
    s = check_workspace(workspace, workspace_bytes, device);
    if (s != MLAV_OK)
        return s;
    cudaStream_t st = (cudaStream_t)stream;
    if (t->memory == MLAV_MEM_DEVICE) {
        s = check_device_tensors(p, t, device);
        if (s != MLAV_OK)
            return s;
        return fn(p, state, t, workspace, workspace_bytes, st);
    }
    return run_offload(p, state, t, workspace, workspace_bytes, st, fn);
}
