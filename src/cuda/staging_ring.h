/* The pinned staging of host updates both CUDA backends' plans for limits share
 * (staging_ring.cu): a ring of MLAV_STAGING_RING pinned host slots, each guarded by an event
 * recorded on the stream after the work that reads it, so that an update writes its slot on the
 * host while the steps before it still run. The cuda backend copies a slot to the workspace
 * (cudaMemcpyAsync); cuda-naive maps its slots (cudaHostAllocMapped) and its step kernel reads
 * them from the device. Included by CUDA code only. */
#ifndef MLAV_CUDA_STAGING_RING_H
#define MLAV_CUDA_STAGING_RING_H

#include <pthread.h>

#include "cuda_device.h"

/* Host updates in flight before one waits for the oldest. */
#define MLAV_STAGING_RING 8

typedef struct mlav_staging_ring {
    size_t slot_bytes;
    char *host;      /* [MLAV_STAGING_RING][slot_bytes] pinned, zeroed at make */
    char *dev;       /* mapped rings: the same memory as the device addresses it; else NULL */
    pthread_mutex_t mu; /* held from acquire to release: a plan's updates may come from many
                           threads (a plan is shared) */
    int mu_made;
    cudaEvent_t ev[MLAV_STAGING_RING];
    int ev_made[MLAV_STAGING_RING];
    int ev_used[MLAV_STAGING_RING]; /* recorded at least once: acquire waits on it */
    int next;                       /* the slot the next acquire takes */
} mlav_staging_ring;

/* One acquired slot. */
typedef struct mlav_staging_slot {
    int index;
    void *host;      /* slot_bytes of pinned host memory */
    void *dev;       /* a mapped ring's device address of the same bytes; else NULL */
} mlav_staging_slot;

/* Make the ring in `r`, which must be zeroed (as in a calloc'd plan state): MLAV_STAGING_RING
 * slots of slot_bytes each, mapped into the device's address space when `mapped` is nonzero.
 * A failed CUDA call gives MLAV_ERR_CUDA, a failed mutex MLAV_ERR_INTERNAL, each with a
 * sentence; what was made before the failure is left for mlav_staging_ring_free. */
mlav_status mlav_staging_ring_make(mlav_staging_ring *r, size_t slot_bytes, int mapped);

/* Free what make made (a zeroed or partly made ring too); the ring is zeroed after. */
void mlav_staging_ring_free(mlav_staging_ring *r);

/* Take the next slot in turn: lock the ring, and wait for the last work recorded on the slot
 * (mlav_staging_ring_release) to have run. MLAV_OK with the lock held and `slot` filled; the
 * caller writes the slot, enqueues the work that reads it and calls release, and may use other
 * per-plan scratch in between, under the same lock. On a failed wait the lock is released and
 * MLAV_ERR_CUDA comes back with a sentence. */
mlav_status mlav_staging_ring_acquire(mlav_staging_ring *r, mlav_staging_slot *slot);

/* Give the slot back and unlock. `work` is the status of what the caller enqueued on `stream`
 * to read the slot: MLAV_OK records the slot's event on the stream after it (the slot is
 * reused once that has run), any other status records nothing and comes back as it is. Returns
 * `work`, or MLAV_ERR_CUDA with a sentence when the record fails. */
mlav_status mlav_staging_ring_release(mlav_staging_ring *r, const mlav_staging_slot *slot,
                                      cudaStream_t stream, mlav_status work);

#endif
