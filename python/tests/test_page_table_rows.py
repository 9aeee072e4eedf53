"""page_table_rows: a page table shared by every request (SGLang's req_to_token indexed by
req_pool_indices), from Plan.run, mv.verify and StepPlan.run: the binding's checks, and the
CPU backends against the reference backend run on the gathered table (rows permuted, a table
with more rows than requests)."""
import numpy as np
import pytest

import mlaverify as mv
from mlav_testutil import compare, make_case, plan_for


def _shared(case, rng, extra):
    """(table, rows): the case's page-table rows scattered into a table of B + extra rows (the
    others: random page ids of the pool, which hold other values or NaN poison) and each
    request's row in it."""
    pt = case["page_table"]
    B, P = pt.shape
    R = B + extra
    table = rng.integers(0, case["kv_cache"].shape[0], (R, P)).astype(np.int32)
    rows = rng.permutation(R)[:B].astype(np.int32)
    table[rows] = pt
    return table, rows


@pytest.mark.parametrize("extra", [0, 1, 37])
@pytest.mark.parametrize("dtype,page_size", [("f32", 1), ("bf16", 16)])
def test_page_table_rows_plan_matches_reference(seed, extra, dtype, page_size):
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=4, Dl=64, Dr=16, dtype=dtype, page_size=page_size,
                     reqs=[(5, 40, "random"), (1, 0, "chain"), (7, 90, "bushy"),
                           (3, 17, "chain")])
    table, rows = _shared(case, rng, extra)
    with plan_for(case, "reference") as ref:
        want_o, want_l = ref.run(case["q"], case["kv_cache"], case["page_table"],
                                 case["tree_mask"])
    for backend in ("cpu", "reference"):
        with plan_for(case, backend) as plan:
            out, lse = plan.run(case["q"], case["kv_cache"], table, case["tree_mask"],
                                page_table_rows=rows)
        compare(case, out, lse, want_o, want_l, "%s rows extra=%d" % (backend, extra), seed)
        if backend == "reference":
            assert np.array_equal(out, want_o) and np.array_equal(lse, want_l)
    out, lse = mv.verify(case["q"], case["kv_cache"], table, case["tree_mask"],
                         q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                         softmax_scale=case["scale"], d_latent=case["Dl"], dtype=dtype,
                         backend="cpu", page_table_rows=rows)
    compare(case, out, lse, want_o, want_l, "verify rows", seed)


def test_page_table_rows_out_of_range_refused(seed):
    """An index outside [0, num_rows) is the library's MLAV_ERR_INVALID_ARG with its sentence,
    and nothing is written: num_rows is page_table's shape[0]."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=2, Dl=16, Dr=8, dtype="f32", page_size=4,
                     reqs=[(3, 5, "bushy"), (2, 0, "chain")])
    table, rows = _shared(case, rng, 3)
    out = np.full((case["T"], 2, 16), 7.0, np.float32)
    for bad in (5, -1, 2**31 - 1):
        r = rows.copy()
        r[1] = bad
        with plan_for(case, "cpu") as plan:
            with pytest.raises(mv.InvalidArgumentError, match="page_table_rows"):
                plan.run(case["q"], case["kv_cache"], table, case["tree_mask"], out=out,
                         page_table_rows=r)
    assert np.all(out == 7.0)


def test_page_table_rows_binding_checks():
    """What the binding refuses before the library: dtype, shape, layout, the table's width
    and rows, and the same place as the other tensors."""
    case = make_case(np.random.default_rng(3), H=2, Dl=16, Dr=8, dtype="f32", page_size=4,
                     reqs=[(3, 5, "bushy"), (2, 0, "chain")])
    args = (case["q"], case["kv_cache"])
    pt = case["page_table"]
    rows = np.array([1, 0], np.int32)
    table = pt[::-1].copy()
    bad = [
        (dict(page_table_rows=rows.astype(np.int64)), "page_table_rows has dtype int64"),
        (dict(page_table_rows=np.array([0, 1, 0], np.int32)),
         r"page_table_rows has shape \[3\], expected \[2\]"),
        (dict(page_table_rows=rows.reshape(2, 1)), r"page_table_rows has shape \[2, 1\]"),
        (dict(page_table_rows=np.array([1, 9, 0, 9], np.int32)[::2]), "not C-contiguous"),
        (dict(page_table_rows=[1, 0]), "numpy array or a torch tensor"),
        (dict(page_table=np.zeros((0, pt.shape[1]), np.int32)), r"num_rows >= 1"),
        (dict(page_table=np.zeros((4, pt.shape[1] + 1), np.int32)), r"num_rows >= 1"),
        (dict(page_table=np.zeros(8, np.int32)), r"num_rows >= 1"),
    ]
    with plan_for(case, "cpu") as plan:
        for change, words in bad:
            kw = dict(page_table=table, page_table_rows=rows)
            kw.update(change)
            with pytest.raises(mv.InvalidArgumentError, match=words):
                plan.run(*args, kw["page_table"], case["tree_mask"],
                         page_table_rows=kw["page_table_rows"])
        # without rows the table is [B, max_pages] as before
        with pytest.raises(mv.InvalidArgumentError, match=r"page_table has shape \[3, 3\]"):
            plan.run(*args, np.concatenate([pt, pt[:1]]), case["tree_mask"])
    step = mv.StepPlan(num_heads=2, softmax_scale=0.5, dtype="f32", page_size=4, max_pages=3,
                       max_batch=4, max_tokens=8, max_q_len=4, max_kv_len=12, d_latent=16,
                       d_rope=8, backend="cpu")
    step.update(case["q_indptr"], case["kv_lens"])
    q = np.zeros((8, 2, 24), np.float32)
    with pytest.raises(mv.InvalidArgumentError,
                       match=r"page_table_rows has shape \[2\], expected \[4\] \(\[max_batch\]"):
        step.run(q, case["kv_cache"], table, page_table_rows=rows)
    with pytest.raises(mv.InvalidArgumentError, match="page_table_rows has dtype uint32"):
        step.run(q, case["kv_cache"], table, page_table_rows=np.zeros(4, np.uint32))
    with pytest.raises(mv.InvalidArgumentError, match=r"num_rows >= 1, 3\]"):
        step.run(q, case["kv_cache"], np.zeros((5, 4), np.int32),
                 page_table_rows=np.zeros(4, np.int32))


def test_page_table_rows_torch_cpu(seed):
    """CPU torch tensors: the StepPlan's fast path takes rows too, with the numpy path's
    numbers and the reference backend's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=2, Dl=16, Dr=8, dtype="f32", page_size=4,
                     reqs=[(3, 5, "bushy"), (2, 0, "chain")])
    table, rows = _shared(case, rng, 6)
    step = mv.StepPlan(num_heads=2, softmax_scale=case["scale"], dtype="f32", page_size=4,
                       max_pages=case["page_table"].shape[1], max_batch=3, max_tokens=8,
                       max_q_len=4, max_kv_len=12, d_latent=16, d_rope=8, backend="cpu")
    step.update(case["q_indptr"], case["kv_lens"])
    q = np.zeros((8, 2, 24), np.float32)
    q[:case["T"]] = case["q"]
    mask = np.zeros((8, 1), np.uint32)
    mask[:case["T"]] = case["tree_mask"]
    rows3 = np.append(rows, 0).astype(np.int32)
    want = [x.copy() for x in step.run(q, case["kv_cache"], table, mask,
                                       page_table_rows=rows3)]
    tq, tkv, tt, tm, tr = (torch.from_numpy(a) for a in (q, case["kv_cache"], table,
                                                         mask.view(np.int32), rows3))
    out, lse = torch.zeros((8, 2, 16)), torch.zeros((8, 2))
    o, l = step.run(tq, tkv, tt, tm, out=out, lse=lse, page_table_rows=tr)
    T = case["T"]
    assert np.array_equal(o[:T].numpy(), want[0][:T]) and np.array_equal(l[:T].numpy(),
                                                                         want[1][:T])
    with plan_for(case, "reference") as ref:
        ro, rl = ref.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
    compare(case, o[:T].numpy(), l[:T].numpy(), ro, rl, "torch rows", seed)
