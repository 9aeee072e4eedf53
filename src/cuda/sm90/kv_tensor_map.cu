/* The launch's tensor maps of the KV pool (kv_tensor_map.h): built per launch from the plan's
 * pool (the tile map, or the row map and the NaN row's), or zeroed with the flag off where the
 * pool does not qualify (kv_pool_mappable) or MLAV90_TMA is 0. */
#include <string.h>

#include "flash_sm90.h"
#include "kv_tensor_map.h"

mlav_status mlav_flash_sm90_kv_map(const mlav_flash_params *fp, int kv_fp8, CUtensorMap *map,
                                   CUtensorMap *nan_map, int *on)
{
    memset(map, 0, sizeof *map);
    memset(nan_map, 0, sizeof *nan_map);
    *on = 0;
    if (!mlav90::kv_pool_mappable(kv_fp8 == 0, fp->page_size, fp->num_pages, fp->kv))
        return MLAV_OK;
    const int tiles = fp->page_size % mlav90::TILE_N == 0;
    mlav90::kv_map_encoder encode = nullptr;
    MLAV_CUDA_TRY(mlav90::kv_map_encoder_get(&encode));
    const uint64_t rows = (uint64_t)fp->num_pages * (uint64_t)fp->page_size;
    CUresult r = mlav90::kv_map_encode(encode, map, fp->kv, rows, tiles ? mlav90::TILE_N : 1);
    if (r == CUDA_SUCCESS && !tiles)
        r = mlav90::kv_map_encode(encode, nan_map, fp->nan_row, 1, 1);
    if (r != CUDA_SUCCESS)
        return mlav_set_error(MLAV_ERR_CUDA,
                              "cuTensorMapEncodeTiled refused the KV pool at %p (%llu rows of %d "
                              "16-bit elements, boxes of %d rows) or its NaN row: CUresult %d "
                              "(%s:%d)",
                              fp->kv, (unsigned long long)rows, mlav90::W,
                              tiles ? mlav90::TILE_N : 1, (int)r, __FILE__, __LINE__);
    *on = tiles ? MLAV90_MAP_TILES : MLAV90_MAP_ROWS;
    return MLAV_OK;
}
