"""Host helpers: tree masks, greedy acceptance, merging states (numpy through the binding)."""
import numpy as np
import pytest

import mlaverify as mv
from mlav_testutil import compare, make_case, make_parents, plan_for


def _mask_py(parents, words):
    n = len(parents)
    m = np.zeros((n, words), dtype=np.uint32)
    for i in range(n):
        k = i
        while k >= 0:
            m[i, k // 32] |= np.uint32(1 << (k % 32))
            k = parents[k]
    return m


@pytest.mark.parametrize("n", [1, 9, 32, 33, 64])
def test_helpers_tree_mask_from_parents(n, seed):
    rng = np.random.default_rng(seed)
    par = make_parents(rng, n, "random")
    got = mv.tree_mask_from_parents(par)
    assert got.dtype == np.uint32 and got.shape == (n, mv.tree_mask_words(n))
    assert np.array_equal(got, _mask_py(par, got.shape[1]))
    assert np.array_equal(mv.parents_from_tree_mask(got, [0, n]), par)
    assert np.array_equal(mv.pack_mask(mv.unpack_mask(got, n), words=got.shape[1]), got)


def test_helpers_batch_mask_and_parents_roundtrip(seed):
    rng = np.random.default_rng(seed)
    lens = [5, 40, 1, 9]
    par = np.concatenate([make_parents(rng, n, "random") for n in lens])
    qi = np.concatenate([[0], np.cumsum(lens)])
    m = mv.tree_mask_from_parents(par, qi)
    assert m.shape == (sum(lens), 2)
    for b, n in enumerate(lens):
        assert np.array_equal(m[qi[b]:qi[b + 1]], _mask_py(par[qi[b]:qi[b + 1]], 2))
    assert np.array_equal(mv.parents_from_tree_mask(m, qi), par)
    bad = m.copy()
    bad[2, 0] &= ~np.uint32(1)  # node 2 of request 0 no longer sees the root
    with pytest.raises(mv.InvalidArgumentError, match="not a tree mask|sees no earlier node"):
        mv.parents_from_tree_mask(bad, qi)


def test_helpers_accept_greedy():
    #      0
    #     / \
    #    1   2      draft tokens: 1->7, 2->8, 3->9, 4->5
    #   / \
    #  3   4
    parents = [-1, 0, 0, 1, 1]
    draft = [100, 7, 8, 9, 5]
    target = [8, 5, 4, 0, 0]          # after node 0 the model says 8 -> node 2 (not 1)
    path, bonus = mv.accept_greedy(parents, draft, target)
    assert path.tolist() == [0, 2] and bonus == 4
    target = [7, 5, 4, 0, 3]          # 0 -> 1 (7), then 5 -> node 4, then bonus target[4]
    path, bonus = mv.accept_greedy(parents, draft, target)
    assert path.tolist() == [0, 1, 4] and bonus == 3
    path, bonus = mv.accept_greedy(parents, draft, [1, 0, 0, 0, 0])
    assert path.tolist() == [0] and bonus == 1


def test_helpers_merge_states_math(seed):
    rng = np.random.default_rng(seed)
    outs = [rng.standard_normal((3, 4, 8)).astype(np.float32) for _ in range(3)]
    lses = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3)]
    lses[1][0, 0] = -np.inf
    out, lse = mv.merge_states(outs, lses)
    L = np.stack(lses).astype(np.float64)
    m = L.max(0)
    w = np.exp(L - m)
    want_lse = m + np.log(w.sum(0))
    want = (np.stack(outs) * (w / w.sum(0))[..., None]).sum(0)
    assert np.allclose(lse, want_lse, atol=1e-5) and np.allclose(out, want, atol=1e-5)
    # in place into the first state
    o0, l0 = mv.merge_states(outs, lses, out=outs[0], lse=lses[0])
    assert o0 is outs[0] and np.allclose(o0, want, atol=1e-5)


def test_helpers_merge_states_of_kv_shards(seed):
    """Attention over a request's KV = merge of attention over two disjoint halves (how an
    engine spreads one context over GPUs): split the prefix, run both shards, merge."""
    rng = np.random.default_rng(seed)
    full = make_case(rng, H=4, Dl=64, Dr=16, dtype="f32", page_size=1,
                     reqs=[(1, 300, "chain")], poison=False)
    with plan_for(full, "reference") as plan:
        want_out, want_lse = plan.run(full["q"], full["kv_cache"], full["page_table"], None)
    rows = full["page_table"][0, :301]
    k = 137

    def shard(kv_rows, see_draft):
        # prefix = kv_rows, then one draft row (the real one, visible or not)
        pt = np.concatenate([kv_rows, rows[300:301]]).astype(np.int32)[None, :]
        mask = np.array([[1 if see_draft else 0]], dtype=np.uint32)
        return mv.verify(full["q"], full["kv_cache"], pt, mask, q_indptr=[0, 1],
                         kv_lens=[pt.shape[1]], softmax_scale=full["scale"], d_latent=64,
                         backend="reference")

    a_out, a_lse = shard(rows[:k], False)
    b_out, b_lse = shard(rows[k:300], True)
    out, lse = mv.merge_states([a_out, b_out], [a_lse, b_lse])
    compare(full, out, lse, want_out, want_lse, "merged shards", seed)
