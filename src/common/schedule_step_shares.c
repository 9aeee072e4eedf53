/* Equal shares in a step (schedule_step_shares.h): the host's build, which the device scheduler
 * (src/cuda/schedule_step_shares.cuh, step_shares) writes byte for byte. */
#include "schedule_step_shares.h"

#include <stdlib.h>
#include <string.h>

/* By start, then part (schedule_step_shares.h); no two pieces of one part start together. */
static int later_order(const void *x, const void *y)
{
    const mlav_step_shares_later *a = x, *b = y;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return a->part < b->part ? -1 : a->part > b->part;
}

int mlav_step_shares_build(const mlav_step_shares_batch *r, const mlav_schedule_params *sp,
                           const mlav_step_bounds *bd, int64_t uniform, mlav_split_item *items,
                           mlav_combine_item *combine, mlav_step_shares_scratch *sc,
                           mlav_step_shares_made *made)
{
    if (!sp->shares || sp->block_cost_keys <= 0 || r->n < 2 || uniform < 0)
        return 0;
    const int32_t *q_indptr = r->q_indptr, *kv_lens = r->kv_lens;
    const int64_t ka = sp->key_align, mt = r->tiles[0];
    int64_t N = 0;
    for (int32_t i = 0; i < r->n; i++) {
        if (r->tiles[i] != mt)
            return 0;
        N += mlav_step_ceil_div(r->kv[i], ka);
    }
    const int64_t P = mlav_step_shares_parts(r->n, mt, N, sp->target_blocks);
    if (P == 0)
        return 0;
    int64_t *first = sc->first;
    first[0] = 0;
    for (int32_t i = 0; i < r->n; i++)
        first[i + 1] = first[i] + mlav_step_ceil_div(r->kv[i], ka);
    /* each request's pieces (the parts it touches), each part's pieces past its first (the
     * requests that start inside it) */
    memset(sc->inside, 0, (size_t)P * sizeof(int32_t));
    int32_t most = 0, later = 0, slots = 0, n_comb = 0;
    for (int32_t i = 0; i < r->n; i++) {
        const int64_t j0 = mlav_step_part_of(N, P, first[i]);
        const int64_t cnt = mlav_step_part_of(N, P, first[i + 1] - 1) - j0 + 1;
        if (cnt > sp->max_splits)
            return 0;
        sc->count[i] = (int32_t)cnt;
        sc->slot0[i] = cnt > 1 ? slots : -1;
        if (cnt > 1) {
            slots += (int32_t)(cnt * mt);
            n_comb += (int32_t)mt;
            most = (int32_t)cnt > most ? (int32_t)cnt : most;
        }
        if (mlav_step_part_begin(N, P, j0) != first[i]) {
            sc->inside[j0]++;
            later++;
        }
    }
    int64_t t = 0;
    for (int64_t j = 0; j < P; j++) {
        const int64_t tj = mlav_step_part_time(
            mlav_step_part_begin(N, P, j + 1) - mlav_step_part_begin(N, P, j), 1 + sc->inside[j],
            sp);
        t = tj > t ? tj : t;
    }
    t += (int64_t)sp->split_cost_keys * most;
    const int64_t n_items = (P + later) * mt;
    /* one_wave 0: a step keeps the 0.97 margin (mlav_shares_win) */
    if (!mlav_shares_win(t, uniform, 0) || n_items > bd->max_items || slots > bd->max_slots ||
        n_comb > bd->max_combine)
        return 0;

    /* the pieces in dispatch order: each part's first, by part; then those that start inside a
     * part, by start, then part */
    for (int64_t j = 0; j < P; j++) {
        const int64_t a = mlav_step_part_begin(N, P, j), e = mlav_step_part_begin(N, P, j + 1);
        const int32_t i = mlav_step_shares_owner(first, r->n, a);
        sc->piece_req[j] = i;
        sc->piece_k[j] = (int32_t)(j - mlav_step_part_of(N, P, first[i]));
        sc->piece_t0[j] = a;
        sc->piece_t1[j] = first[i + 1] < e ? first[i + 1] : e;
    }
    int32_t nl = 0;
    for (int32_t i = 1; i < r->n; i++) {
        const int64_t j = mlav_step_part_of(N, P, first[i]), a = mlav_step_part_begin(N, P, j);
        if (a != first[i])
            sc->later[nl++] = (mlav_step_shares_later){
                mlav_step_piece_start(first[i] - a,
                                      i - mlav_step_shares_owner(first, r->n, a), sp),
                (int32_t)j, i};
    }
    qsort(sc->later, (size_t)nl, sizeof(mlav_step_shares_later), later_order);
    for (int32_t k = 0; k < nl; k++) {
        const int32_t i = sc->later[k].req;
        const int64_t e = mlav_step_part_begin(N, P, sc->later[k].part + 1);
        sc->piece_req[P + k] = i;
        sc->piece_k[P + k] = 0;
        sc->piece_t0[P + k] = first[i];
        sc->piece_t1[P + k] = first[i + 1] < e ? first[i + 1] : e;
    }
    int64_t n = 0;
    for (int64_t k = 0; k < P + later; k++) {
        const int32_t i = sc->piece_req[k], b = r->b[i], q = q_indptr[b + 1] - q_indptr[b];
        const int64_t end = (sc->piece_t1[k] - first[i]) * ka;
        mlav_split_item x = {.b = b, .mtile = 0,
                             .kv_begin = (int32_t)((sc->piece_t0[k] - first[i]) * ka),
                             .kv_end = (int32_t)(end < kv_lens[b] ? end : kv_lens[b]),
                             .slot = -1, .q_start = q_indptr[b], .q_len = q,
                             .prefix = kv_lens[b] - q};
        for (int32_t m = 0; m < mt; m++) {
            x.mtile = m;
            x.slot = sc->slot0[i] < 0 ? -1 : sc->slot0[i] + sc->piece_k[k] * (int32_t)mt + m;
            items[n++] = x;
        }
    }
    int32_t co = 0;
    for (int32_t i = 0; i < r->n; i++) {
        if (sc->count[i] < 2)
            continue;
        const int32_t b = r->b[i], q = q_indptr[b + 1] - q_indptr[b];
        for (int32_t m = 0; m < mt; m++)
            combine[co++] = (mlav_combine_item){.b = b, .mtile = m, .nsplit = sc->count[i],
                                                .slot0 = sc->slot0[i] + m,
                                                .slot_stride = (int32_t)mt,
                                                .q_start = q_indptr[b],
                                                .rows = (int32_t)((int64_t)q * r->H)};
    }
    made->items = (int32_t)n_items;
    made->combine = n_comb;
    made->slots = slots;
    made->most = most;
    const int64_t share = mlav_step_ceil_div(N, P) * ka;
    made->chunk_keys = (int32_t)(share < INT32_MAX ? share : INT32_MAX);
    return 1;
}
