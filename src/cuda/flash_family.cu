/* The split-kernel family rule (flash_family.h). Read at plan time by the backend, never by a
 * kernel. */
#include <stdlib.h>
#include <string.h>

#include "flash_family.h"

mlav_flash_family mlav_flash_family_of(int cc_major, int cc_minor, const char **why)
{
    const char *unused;
    const char **w = why ? why : &unused;
#ifdef MLAV_WITH_SM90
    if (cc_major != 9 || cc_minor != 0) {
        *w = "the sm_90a family runs on compute capability 9.0 only";
        return MLAV_FLASH_FAMILY_LEGAL;
    }
    const char *env = getenv("MLAV_FLASH_FAMILY");
    if (env && strcmp(env, "legal") == 0) {
        *w = "MLAV_FLASH_FAMILY=legal";
        return MLAV_FLASH_FAMILY_LEGAL;
    }
    if (env && strcmp(env, "sm90") == 0) {
        *w = "MLAV_FLASH_FAMILY=sm90 (every BF16 or F16 plan, short requests included)";
        return MLAV_FLASH_FAMILY_SM90;
    }
    *w = "cc 9.0 (BF16 or F16 q over a cache of its dtype or FP8 E4M3); its keys kernel for an "
         "FP8 cache whose requests have at most 8 rows, and at most 16 from 3 KV tiles of 64 keys "
         "an SM; F32, other batches of requests of at most 32 rows that read fewer than 6 tiles "
         "an SM, and other FP8 caches read as fewer than 8 tiles of 64 rows an SM (6 where a "
         "request has more than 64 rows) run the legal family (MLAV_FLASH_FAMILY=sm90 forces "
         "it); its seesaw kernel for other FP8 caches and where blocks have at least 6 tiles, "
         "else its producer kernel (MLAV_SM90_KERNEL=seesaw or producer forces one); an FP8 "
         "cache whose KV rows are read by 8 or more 64-row tiles on average staged as F16 "
         "before the seesaw kernel in a plan for one problem (MLAV_SM90_KERNEL=staged forces it); "
         "the seesaw's 16-bit KV copies under the L2 evict_first policy where a plan reads at "
         "most 256 MB of KV";
    return MLAV_FLASH_FAMILY_SM90;
#else
    (void)cc_major;
    (void)cc_minor;
    *w = "this library was built without the sm_90a family (no 90 in CMAKE_CUDA_ARCHITECTURES, "
         "or a toolkit without sm_90a)";
    return MLAV_FLASH_FAMILY_LEGAL;
#endif
}

mlav_flash_family mlav_flash_family_for_plan(int cc_major, int cc_minor, int64_t rows_per_request,
                                             int64_t total_kv, int sm_count, int kv_fp8,
                                             float scale, int sharded)
{
    const mlav_flash_family f = mlav_flash_family_of(cc_major, cc_minor, NULL);
    if (sharded)
        return MLAV_FLASH_FAMILY_LEGAL; /* the sm_90a kernel takes no KV shard */
    const char *env = getenv("MLAV_FLASH_FAMILY");
    if (f != MLAV_FLASH_FAMILY_SM90 || (env && strcmp(env, "sm90") == 0))
        return f;
    const int64_t sm_tile = (int64_t)MLAV_FLASH_SM90_TILE_N * sm_count; /* a 64-key tile an SM */
    /* an FP8 cache the keys kernel takes: its 8-row instance at any tile count, its 16-row one
     * from MLAV_SM90_KEYS16_MIN_TILES 64-key tiles an SM */
    const int keys = mlav_flash_sm90_keys_rule(rows_per_request, kv_fp8, scale);
    if (keys == 8)
        return f;
    if (keys == 16)
        return total_kv < MLAV_SM90_KEYS16_MIN_TILES * sm_tile ? MLAV_FLASH_FAMILY_LEGAL : f;
    if (rows_per_request <= 32 && total_kv < MLAV_SM90_MIN_TILES * sm_tile)
        return MLAV_FLASH_FAMILY_LEGAL; /* one 64-row tile at most half full, a few tiles a split */
    /* an FP8 cache the seesaw kernel takes: its 64-row tiles of KV (each request's row tiles
     * times its tiles of keys, taken as the widest request's over the batch's keys) against
     * MLAV_SM90_FP8_MIN_TILES an SM, or MLAV_SM90_FP8_WIDE_MIN_TILES for requests of two row
     * tiles or more */
    const int64_t row_tiles =
        (rows_per_request + MLAV_FLASH_SM90_TILE_N - 1) / MLAV_FLASH_SM90_TILE_N;
    const int64_t fp8_min = row_tiles >= 2 ? MLAV_SM90_FP8_WIDE_MIN_TILES : MLAV_SM90_FP8_MIN_TILES;
    if (kv_fp8 && row_tiles * total_kv < fp8_min * sm_tile)
        return MLAV_FLASH_FAMILY_LEGAL;
    return f;
}

int mlav_flash_sm90_seesaw_rule(int64_t tile_rows, int64_t n_items, int kv_fp8, float scale)
{
    if (!(scale > 0.0f))
        return 0; /* whatever MLAV_SM90_KERNEL says: the seesaw kernel's maxima are raw */
    const char *env = getenv("MLAV_SM90_KERNEL");
    if (env && (strcmp(env, "seesaw") == 0 || strcmp(env, "staged") == 0))
        return 1;
    if (env && strcmp(env, "producer") == 0)
        return 0;
    if (kv_fp8)
        return 1; /* the producer kernel's conversion sits on its ring's critical path */
    return n_items > 0 && tile_rows >= (int64_t)MLAV_SM90_MIN_TILES * n_items;
}

int mlav_flash_sm90_seesaw_limits(int64_t row_tiles, int64_t max_kv_len, int64_t max_tiles,
                                  int64_t target_blocks, int64_t max_items, int kv_fp8,
                                  float scale)
{
    const int64_t kv_tiles = (max_kv_len + MLAV_FLASH_SM90_TILE_N - 1) / MLAV_FLASH_SM90_TILE_N;
    int64_t items = target_blocks > 0
                        ? (max_tiles + target_blocks - 1) / target_blocks * target_blocks
                        : max_items;
    items = items < max_items ? items : max_items;
    return mlav_flash_sm90_seesaw_rule(row_tiles * kv_tiles, items, kv_fp8, scale);
}

int mlav_flash_sm90_keys_rule(int64_t max_rows, int kv_fp8, float scale)
{
    const char *env = getenv("MLAV_SM90_KERNEL");
    if (env && (strcmp(env, "seesaw") == 0 || strcmp(env, "producer") == 0 ||
                strcmp(env, "staged") == 0))
        return 0;
    if (!kv_fp8 || !(scale > 0.0f) || max_rows < 1 || max_rows > 16)
        return 0;
    return max_rows <= 8 ? 8 : 16;
}

int mlav_flash_sm90_staged_rule(int64_t row_tile_keys, int64_t total_kv, int kv_fp8, float scale,
                                int seesaw)
{
    if (!kv_fp8 || !seesaw || !(scale > 0.0f) || total_kv < 1)
        return 0;
    const char *env = getenv("MLAV_SM90_KERNEL");
    if (env && strcmp(env, "staged") == 0)
        return 1;
    if (env && (strcmp(env, "seesaw") == 0 || strcmp(env, "producer") == 0))
        return 0;
    return row_tile_keys >= (int64_t)MLAV_SM90_FP8_STAGED_MIN_ROW_TILES * total_kv;
}

int mlav_flash_sm90_early_s_rule(int64_t row_tile_keys, int64_t total_kv, int32_t batch,
                                 int kv_fp8, int seesaw)
{
    if (kv_fp8 || !seesaw || total_kv < 1 || batch < 1)
        return 0;
    const char *env = getenv("MLAV_SM90_EARLY_S");
    if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
        return env[0] == '1';
    return row_tile_keys >= (int64_t)MLAV_SM90_EARLY_S_MIN_ROW_TILES * total_kv &&
           total_kv >= (int64_t)MLAV_SM90_EARLY_S_MIN_KV * batch;
}

int mlav_flash_sm90_l2_first(int64_t kv_rows, int32_t W, int kv_fp8)
{
    return !kv_fp8 && kv_rows >= 0 && W > 0 && kv_rows * W * 2 <= MLAV_SM90_L2_FIRST_BYTES;
}

const char *mlav_flash_family_name(mlav_flash_family f)
{
    return f == MLAV_FLASH_FAMILY_SM90 ? "sm_90a (wgmma)" : "sm_120-legal (mma.sync)";
}
