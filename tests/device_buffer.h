/* Guarded device buffers for the GPU tests of outputs written by the library: [guard][payload]
 * [guard], guards GUARD_BYTE, payload 0xFF (NaN in every dtype), so that a write outside the
 * payload and a payload element left unwritten both show. Include after cmocka.h and
 * cuda_runtime_api.h (the checks fail the test through TU_CK). */
#ifndef MLAV_TESTS_DEVICE_BUFFER_H
#define MLAV_TESTS_DEVICE_BUFFER_H

#include <stdlib.h>
#include <string.h>

#include "test_util.h"

#define DBUF_GUARD 256
#define DBUF_GUARD_BYTE 0xA5

typedef struct dbuf {
    unsigned char *base;
    void *p;
    size_t bytes;
} dbuf;

static inline dbuf dbuf_alloc(size_t bytes)
{
    dbuf b = {NULL, NULL, bytes};
    TU_CK(cudaMalloc((void **)&b.base, bytes + 2 * DBUF_GUARD));
    TU_CK(cudaMemset(b.base, DBUF_GUARD_BYTE, bytes + 2 * DBUF_GUARD));
    b.p = b.base + DBUF_GUARD;
    TU_CK(cudaMemset(b.p, 0xFF, bytes));
    TU_CK(cudaDeviceSynchronize()); /* a memset may still run when a non-blocking stream starts */
    return b;
}

/* Copy the payload to `host` and check the guards (1: intact). */
static inline int dbuf_read(const dbuf *b, void *host)
{
    unsigned char *h = tu_xcalloc(b->bytes + 2 * DBUF_GUARD, 1);
    TU_CK(cudaMemcpy(h, b->base, b->bytes + 2 * DBUF_GUARD, cudaMemcpyDeviceToHost));
    int ok = 1;
    for (size_t i = 0; i < DBUF_GUARD; i++)
        ok &= h[i] == DBUF_GUARD_BYTE && h[DBUF_GUARD + b->bytes + i] == DBUF_GUARD_BYTE;
    memcpy(host, h + DBUF_GUARD, b->bytes);
    free(h);
    return ok;
}

static inline void dbuf_write(dbuf *b, const void *host)
{
    TU_CK(cudaMemcpy(b->p, host, b->bytes, cudaMemcpyHostToDevice));
    TU_CK(cudaDeviceSynchronize()); /* a pageable copy may return before its DMA lands */
}

static inline void dbuf_free(dbuf *b)
{
    TU_CK(cudaFree(b->base));
    b->base = NULL;
    b->p = NULL;
}

#endif
