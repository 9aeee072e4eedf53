/* The ring of pinned staging slots of host updates (staging_ring.h). */
#include <string.h>

#include "staging_ring.h"

mlav_status mlav_staging_ring_make(mlav_staging_ring *r, size_t slot_bytes, int mapped)
{
    r->slot_bytes = slot_bytes;
    const size_t bytes = slot_bytes * MLAV_STAGING_RING;
    MLAV_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void **>(&r->host), bytes,
                                mapped ? cudaHostAllocMapped : cudaHostAllocDefault));
    /* a caller that writes only part of a slot then hands on the same bytes whichever slot it
     * got (the cuda backend's step region: its tail past the combine items, which the device
     * scheduler writes as zeros) */
    memset(r->host, 0, bytes);
    if (mapped)
        MLAV_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void **>(&r->dev), r->host, 0));
    for (int i = 0; i < MLAV_STAGING_RING; i++) {
        MLAV_CUDA_TRY(cudaEventCreateWithFlags(&r->ev[i], cudaEventDisableTiming));
        r->ev_made[i] = 1;
    }
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        return mlav_set_error(MLAV_ERR_INTERNAL, "pthread_mutex_init failed");
    r->mu_made = 1;
    return MLAV_OK;
}

void mlav_staging_ring_free(mlav_staging_ring *r)
{
    for (int i = 0; i < MLAV_STAGING_RING; i++)
        if (r->ev_made[i])
            cudaEventDestroy(r->ev[i]);
    if (r->host)
        cudaFreeHost(r->host);
    if (r->mu_made)
        pthread_mutex_destroy(&r->mu);
    memset(r, 0, sizeof *r);
}

mlav_status mlav_staging_ring_acquire(mlav_staging_ring *r, mlav_staging_slot *slot)
{
    pthread_mutex_lock(&r->mu);
    const int k = r->next;
    r->next = (r->next + 1) % MLAV_STAGING_RING;
    const cudaError_t e = r->ev_used[k] ? cudaEventSynchronize(r->ev[k]) : cudaSuccess;
    if (e != cudaSuccess) {
        pthread_mutex_unlock(&r->mu);
        return mlav_cuda_error(e, "cudaEventSynchronize of a staging slot", __FILE__, __LINE__);
    }
    const size_t off = (size_t)k * r->slot_bytes;
    slot->index = k;
    slot->host = r->host + off;
    slot->dev = r->dev ? r->dev + off : NULL;
    return MLAV_OK;
}

mlav_status mlav_staging_ring_release(mlav_staging_ring *r, const mlav_staging_slot *slot,
                                      cudaStream_t stream, mlav_status work)
{
    const int k = slot->index;
    if (work == MLAV_OK) {
        const cudaError_t e = cudaEventRecord(r->ev[k], stream);
        if (e != cudaSuccess)
            work = mlav_cuda_error(e, "cudaEventRecord of a host update", __FILE__, __LINE__);
        else
            r->ev_used[k] = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return work;
}
