"""Context-parallel (sharded) verify through the binding on the CPU backends: each rank's Plan
with shard=(ranks, rank, stripe) over its own pages (the global cache's rows scattered by the
layout, written here independently of the library), the ranks' partial states merged with
mlaverify.merge_states and compared with the numpy fp64 oracle of the whole cache. Fresh seeds
(printed; MLAV_TEST_SEED reproduces a failure)."""
import numpy as np
import pytest

import mlaverify as mv
from mlav_testutil import compare, make_case, oracle, round_to_dtype


def rank_copy(case, ranks, rank, stripe, rng):
    """The rank's pool [pages, page_size, W] (NaN / 0x7f where it holds nothing) and page table
    [B, max_pages] of its local rows: global row g is the rank's when (g // stripe) % ranks ==
    rank, at local row (g // (stripe * ranks)) * stripe + g % stripe."""
    ps, kv_lens = case["page_size"], case["kv_lens"]
    pool, pt = case["kv_cache"], case["page_table"]
    held = []
    for kv in kv_lens:
        g = np.arange(int(kv))
        held.append(g[(g // stripe) % ranks == rank])
    pages = [-(-len(h) // ps) for h in held]
    n_pages = sum(pages) + 2
    perm = rng.permutation(n_pages).astype(np.int32)
    local_pt = np.full((len(kv_lens), max(pages) + 1), perm[-1], dtype=np.int32)
    # NaN where the rank holds nothing: the byte 0x7f of an FP8 cache, a BF16 NaN's bits
    poison = {np.dtype(np.uint8): 0x7f, np.dtype(np.uint16): 0x7fc0}.get(pool.dtype, np.nan)
    local = np.full((n_pages,) + pool.shape[1:], poison, dtype=pool.dtype)
    at = 0
    for b, g in enumerate(held):
        local_pt[b, :pages[b]] = perm[at:at + pages[b]]
        at += pages[b]
        loc = (g // (stripe * ranks)) * stripe + g % stripe
        local[local_pt[b, loc // ps], loc % ps] = pool[pt[b, g // ps], g % ps]
    return local, local_pt, [len(h) for h in held]


def run_sharded(case, ranks, stripe, rng, steps=False):
    """Every rank's (out, lse) on the cpu backend: a Plan each, or with steps a StepPlan updated
    with the global host lengths."""
    outs, lses, empty = [], [], False
    for r in range(ranks):
        local, local_pt, held = rank_copy(case, ranks, r, stripe, rng)
        empty |= any(h == 0 and n > 0 for h, n in zip(held, np.diff(case["q_indptr"])))
        common = dict(num_heads=case["H"], d_latent=case["Dl"], d_rope=case["Dr"],
                      softmax_scale=case["scale"], dtype=case["dtype"],
                      page_size=case["page_size"], max_pages=local_pt.shape[1],
                      kv_dtype=case["kv_dtype"], shard=(ranks, r, stripe))
        kw = {"kv_scale": case["kv_scale"]} if case["kv_scale"] is not None else {}
        if steps:
            q_lens = np.diff(case["q_indptr"])
            sp = mv.StepPlan(max_batch=len(case["kv_lens"]), max_tokens=case["T"],
                             max_q_len=int(q_lens.max()), max_kv_len=int(case["kv_lens"].max()),
                             backend="cpu", **common)
            sp.update(case["q_indptr"], case["kv_lens"])
            out, lse = sp.run(case["q"], local, local_pt, case["tree_mask"], **kw)
            assert sp.shard == (ranks, r, stripe)
            sp.close()
        else:
            with mv.Plan(q_indptr=case["q_indptr"], kv_lens=case["kv_lens"], backend="cpu",
                         **common) as plan:
                assert plan.problem.shard == (ranks, r, stripe)
                out, lse = plan.run(case["q"], local, local_pt, case["tree_mask"], **kw)
        outs.append(np.asarray(out).copy())
        lses.append(np.asarray(lse).copy())
    return outs, lses, empty


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("kind", ["token", "page", "chunk"])
def test_shards_merge_to_the_whole_cache(ranks, page_size, kind, seed):
    rng = np.random.default_rng(seed)
    dtype, kv_dtype = [("f32", None), ("bf16", None), ("f16", None),
                       ("bf16", "fp8_e4m3")][int(rng.integers(0, 4))]
    reqs = [(int(rng.integers(1, 7)), int(rng.integers(0, 90)) if rng.random() < 0.8 else 0,
             ["chain", "bushy", "random"][int(rng.integers(0, 3))])
            for _ in range(int(rng.integers(1, 4)))]
    case = make_case(rng, H=2, Dl=32, Dr=8, dtype=dtype, page_size=page_size, reqs=reqs,
                     causal=bool(rng.random() < 0.25), kv_dtype=kv_dtype)
    longest = int(case["kv_lens"].max())
    stripe = {"token": 1, "page": page_size, "chunk": -(-longest // ranks)}[kind]
    what = "%d ranks, stripe %d (%s), page %d, %s%s" % (
        ranks, stripe, kind, page_size, dtype, ", fp8 cache" if kv_dtype else "")
    o64, l64 = oracle(case)
    for steps in (False, True):
        outs, lses, _ = run_sharded(case, ranks, stripe, rng, steps=steps)
        out, lse = mv.merge_states(np.stack(outs), np.stack(lses), dtype=dtype)
        compare(case, out, lse, round_to_dtype(o64, dtype), l64,
                what + (", StepPlan" if steps else ", Plan"), seed)


def test_a_rank_without_rows_gives_the_empty_state(seed):
    """A chunk layout whose last rank holds nothing of a short request: out 0, lse -inf."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=2, Dl=32, Dr=8, dtype="f32", page_size=1,
                     reqs=[(2, 3, "chain"), (3, 40, "random")])
    outs, lses, empty = run_sharded(case, 3, 20, rng)
    assert empty
    short = slice(0, 2)  # request 0 (5 rows): rank 1 and 2 hold none of it
    assert np.all(outs[2][short] == 0) and np.all(lses[2][short] == -np.inf)
    out, lse = mv.merge_states(np.stack(outs), np.stack(lses))
    o64, l64 = oracle(case)
    compare(case, out, lse, round_to_dtype(o64, "f32"), l64, "chunk 20 over 3 ranks", seed)


def test_one_shot_verify_takes_a_shard(seed):
    """mv.verify(shard=...) runs the rank's shard: the same as the rank's Plan."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=2, Dl=32, Dr=8, dtype="f32", page_size=4,
                     reqs=[(3, 21, "random"), (2, 9, "chain")])
    local, local_pt, _ = rank_copy(case, 2, 1, 4, rng)
    out, lse = mv.verify(case["q"], local, local_pt, case["tree_mask"],
                         q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                         softmax_scale=case["scale"], d_latent=32, backend="cpu",
                         shard=(2, 1, 4))
    with mv.Plan(num_heads=2, d_latent=32, d_rope=8, softmax_scale=case["scale"],
                 dtype="f32", page_size=4, q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                 max_pages=local_pt.shape[1], shard=(2, 1, 4), backend="cpu") as plan:
        want = plan.run(case["q"], local, local_pt, case["tree_mask"])
    assert np.array_equal(out, want[0]) and np.array_equal(lse, want[1])


@pytest.mark.parametrize("shard,needle", [((-1, 0, 1), "shard_ranks = -1"),
                                          ((2, 2, 1), "shard_rank = 2"),
                                          ((0, 1, 1), "shard_rank = 1"),
                                          ((2, 0, -4), "shard_stripe = -4")])
def test_bad_shard_fields_are_refused_with_the_library_sentence(shard, needle):
    with pytest.raises(mv.InvalidArgumentError, match=needle):
        mv.Plan(num_heads=2, d_latent=32, d_rope=8, softmax_scale=0.1, dtype="f32",
                q_indptr=[0, 1], kv_lens=[5], backend="cpu", shard=shard)


@pytest.mark.parametrize("shard", [(2, 0), "abc", 3, (1, 0, 1.5), (2**31, 0, 1)])
def test_shard_must_be_three_int32s(shard):
    with pytest.raises(mv.InvalidArgumentError, match="shard"):
        mv.Plan(num_heads=2, d_latent=32, d_rope=8, softmax_scale=0.1, dtype="f32",
                q_indptr=[0, 1], kv_lens=[5], backend="cpu", shard=shard)
