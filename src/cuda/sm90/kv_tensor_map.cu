/* The launch's tensor map of the KV pool (kv_tensor_map.h): built per launch from the plan's
 * pool, or zeroed with the flag off where the pool does not qualify (kv_map_fits) or MLAV90_TMA
 * is 0. */
#include <string.h>

#include "flash_sm90.h"
#include "kv_tensor_map.h"

mlav_status mlav_flash_sm90_kv_map(const mlav_flash_params *fp, int kv_fp8, CUtensorMap *map,
                                   int *on)
{
    memset(map, 0, sizeof *map);
    *on = 0;
    if (!mlav90::kv_map_fits(kv_fp8 == 0, fp->page_size, fp->num_pages, fp->kv))
        return MLAV_OK;
    mlav90::kv_map_encoder encode = nullptr;
    MLAV_CUDA_TRY(mlav90::kv_map_encoder_get(&encode));
    const uint64_t rows = (uint64_t)fp->num_pages * (uint64_t)fp->page_size;
    const CUresult r = mlav90::kv_map_encode(encode, map, fp->kv, rows);
    if (r != CUDA_SUCCESS)
        return mlav_set_error(MLAV_ERR_CUDA,
                              "cuTensorMapEncodeTiled refused the KV pool at %p (%llu rows of %d "
                              "16-bit elements): CUresult %d (%s:%d)",
                              fp->kv, (unsigned long long)rows, mlav90::W, (int)r, __FILE__,
                              __LINE__);
    *on = 1;
    return MLAV_OK;
}
