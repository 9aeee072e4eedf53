/* The safetensors container: read and write (8-byte little-endian header length, JSON header,
 * raw little-endian tensor data), with every offset, shape and byte count checked on read. */
#ifndef MLAV_BUNDLE_SAFETENSORS_H
#define MLAV_BUNDLE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mlaverify.h"
#include "tool_status.h"

#define MLAV_ST_MAX_RANK 8
/* safetensors' own limit on the JSON header (100 MB): a larger length is corruption */
#define MLAV_ST_MAX_HEADER 100000000ull
/* far more than any bundle holds; bounds the work a hostile header can ask for */
#define MLAV_ST_MAX_TENSORS 1024
/* JSON members of the header (tensor names, their fields, metadata keys), counted before the
 * parse: a bundle has about 60; 2^20 lets the 200k-key headers of the tests parse while a
 * 100 MB header of tiny keys (14M members, GBs of cJSON nodes) is refused up front */
#define MLAV_ST_MAX_MEMBERS (1 << 20)

typedef struct mlav_st_tensor {
    char *name;     /* owned */
    char dtype[12]; /* safetensors name: "F32", "BF16", "F16", "I32", ... */
    int32_t rank;   /* 0..MLAV_ST_MAX_RANK */
    int64_t shape[MLAV_ST_MAX_RANK];
    uint64_t nbytes; /* product(shape) * element size */
    void *data;      /* nbytes bytes, owned (malloc: aligned for any scalar) */
} mlav_st_tensor;

typedef struct mlav_st_meta {
    char *key, *value; /* owned; safetensors metadata is string to string */
} mlav_st_meta;

typedef struct mlav_st_file {
    int32_t num_tensors;
    mlav_st_tensor *tensors; /* in file (data offset) order after a read */
    int32_t num_meta;
    mlav_st_meta *meta;
} mlav_st_file;

/* Bytes per element of a safetensors dtype name; 0 if unknown. */
size_t mlav_st_dtype_size(const char *dtype);

/* Read a whole file. The header must parse, every tensor must have a known dtype, a shape whose
 * byte count equals its data_offsets span, and the spans must tile the data section exactly
 * (contiguous, no overlap, no gap, ending at the end of the file), as the safetensors library
 * itself requires. Returns MLAV_OK, MLAV_ERR_IO (cannot open or read), MLAV_ERR_FORMAT (a
 * sentence naming the tensor and the problem) or MLAV_ERR_OUT_OF_MEMORY. On failure `f` is
 * left empty. */
mlav_status mlav_st_read(const char *path, mlav_st_file *f);

/* Write `f`: tensors in the given order, contiguous from offset 0, header padded with spaces to
 * a multiple of 8 bytes so the data starts 8-byte aligned. Each tensor's nbytes must match its
 * dtype and shape. Returns MLAV_OK, MLAV_ERR_INVALID_ARG or MLAV_ERR_IO. */
mlav_status mlav_st_write(const char *path, const mlav_st_file *f);

void mlav_st_free(mlav_st_file *f);

/* The tensor named `name`, or NULL. */
mlav_st_tensor *mlav_st_find(const mlav_st_file *f, const char *name);
/* The metadata value of `key`, or NULL. */
const char *mlav_st_meta_get(const mlav_st_file *f, const char *key);

/* Append a tensor that takes ownership of `data` (NULL data: allocated zeroed); or a metadata
 * pair (copied). For building files to write. Return MLAV_OK or MLAV_ERR_OUT_OF_MEMORY /
 * MLAV_ERR_INVALID_ARG (unknown dtype, bad rank). */
mlav_status mlav_st_add_tensor(mlav_st_file *f, const char *name, const char *dtype, int32_t rank,
                               const int64_t *shape, void *data);
mlav_status mlav_st_add_meta(mlav_st_file *f, const char *key, const char *value);

#endif
