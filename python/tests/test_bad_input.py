"""Bad input raises a Python exception carrying a status name and a sentence; nothing but
out/lse is written, and nothing is written at all when a check fails."""
import numpy as np
import pytest

import mlaverify as mv
from mlav_testutil import make_case, plan_for


@pytest.fixture
def case():
    return make_case(np.random.default_rng(5), H=2, Dl=16, Dr=8, dtype="f32", page_size=4,
                     reqs=[(3, 5, "bushy"), (2, 0, "chain")])


@pytest.fixture
def plan(case):
    with plan_for(case, "cpu") as p:
        yield p


def _args(case, **over):
    a = dict(q=case["q"], kv_cache=case["kv_cache"], page_table=case["page_table"],
             tree_mask=case["tree_mask"])
    a.update(over)
    return a


def _raises(plan, case, match, cls=mv.InvalidArgumentError, **over):
    out = np.full((case["T"], case["H"], case["Dl"]), 7.0, dtype=np.float32)
    lse = np.full((case["T"], case["H"]), 7.0, dtype=np.float32)
    a = _args(case, **over)
    with pytest.raises(cls, match=match) as e:
        plan.run(a["q"], a["kv_cache"], a["page_table"], a["tree_mask"], out=out, lse=lse)
    assert e.value.status_name.startswith("MLAV_ERR_") and e.value.sentence
    assert str(e.value) == "%s: %s" % (e.value.status_name, e.value.sentence)
    assert np.all(out == 7.0) and np.all(lse == 7.0), "outputs written despite the error"
    return e.value


def test_bad_input_dtype(plan, case):
    _raises(plan, case, "q has dtype float64; the plan's dtype f32 needs float32",
            q=case["q"].astype(np.float64))
    _raises(plan, case, "kv_cache has dtype float16", kv_cache=case["kv_cache"].astype(np.float16))
    _raises(plan, case, "page_table has dtype int64; it must be int32",
            page_table=case["page_table"].astype(np.int64))
    _raises(plan, case, "tree_mask has dtype uint8",
            tree_mask=case["tree_mask"].astype(np.uint8))


def test_bad_input_shapes(plan, case):
    _raises(plan, case, r"q has shape \[5, 2, 23\], expected \[5, 2, 24\]",
            q=np.ascontiguousarray(case["q"][:, :, :23]))
    _raises(plan, case, r"kv_cache has shape .* expected \[num_pages, 4, 24\]",
            kv_cache=case["kv_cache"].reshape(-1, 2, 24))
    _raises(plan, case, r"page_table has shape \[2, 2\], expected \[2, 3\]",
            page_table=np.ascontiguousarray(case["page_table"][:, :2]))
    _raises(plan, case, r"tree_mask has shape \[5, 2\], expected \[5, 1\]",
            tree_mask=np.zeros((5, 2), np.uint32))


def test_bad_input_layout(plan, case):
    _raises(plan, case, "q .* is not C-contiguous", q=np.asfortranarray(case["q"]))
    _raises(plan, case, "numpy array or a torch tensor, not list",
            page_table=case["page_table"].tolist())
    ro = np.zeros((case["T"], case["H"], case["Dl"]), np.float32)
    ro.flags.writeable = False
    with pytest.raises(mv.InvalidArgumentError, match="out is read-only"):
        plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"], out=ro)
    with pytest.raises(mv.InvalidArgumentError, match=r"out has shape \[5, 2, 24\]"):
        plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"],
                 out=np.zeros((5, 2, 24), np.float32))
    with pytest.raises(mv.InvalidArgumentError, match="lse has dtype float64"):
        plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"],
                 lse=np.zeros((5, 2)))
    big = np.zeros(case["q"].shape, dtype=">f4")
    _raises(plan, case, "big-endian", q=big)


def test_bad_input_library_sentences(plan, case):
    """What only the library can see comes back with its sentence."""
    pt = case["page_table"].copy()
    pt[1, 0] = 1000
    _raises(plan, case, r"page_table\[1\]\[0\] = 1000 is outside \[0, num_pages = ", page_table=pt)
    mask = case["tree_mask"].copy()
    mask[4, 0] |= 4  # request 1 has two nodes
    _raises(plan, case, "tree_mask row 4 .* marks a node >= q_len 2", tree_mask=mask)


def test_bad_input_problem():
    with pytest.raises(mv.InvalidArgumentError, match="kv_lens.* is less than q_len"):
        mv.Plan(num_heads=2, d_latent=8, d_rope=0, softmax_scale=1.0, dtype="f32",
                q_indptr=[0, 4], kv_lens=[3], backend="cpu")
    with pytest.raises(mv.InvalidArgumentError, match=r"q_indptr has shape \[2\], expected \[3\]"):
        mv.Problem(num_heads=2, softmax_scale=1.0, q_indptr=[0, 4], kv_lens=[5, 6])
    with pytest.raises(mv.InvalidArgumentError, match="num_heads = 0"):
        mv.Plan(num_heads=0, softmax_scale=1.0, q_indptr=[0, 1], kv_lens=[1], backend="cpu")
    with pytest.raises(mv.InvalidArgumentError, match="kv_lens must hold integers"):
        mv.Problem(num_heads=2, softmax_scale=1.0, q_indptr=[0, 1], kv_lens=[1.5])
    with pytest.raises(mv.InvalidArgumentError, match="is not one of f32, bf16, f16"):
        mv.Problem(num_heads=2, softmax_scale=1.0, q_indptr=[0, 1], kv_lens=[1], dtype="fp8")
    with pytest.raises(mv.InvalidArgumentError, match="backend 'tpu'"):
        mv.Context("tpu")


def test_bad_input_bf16_needs_explicit_dtype(case):
    bits = case["q"].view(np.uint32).astype(np.uint16)  # any uint16 array
    with pytest.raises(mv.InvalidArgumentError, match="pass dtype='bf16'"):
        mv.verify(bits, case["kv_cache"].view(np.uint32).astype(np.uint16), case["page_table"],
                  q_indptr=case["q_indptr"], kv_lens=case["kv_lens"], softmax_scale=1.0,
                  d_latent=16)
    with pytest.raises(mv.InvalidArgumentError, match="ambiguous"):
        mv.Problem(num_heads=2, softmax_scale=1.0, q_indptr=[0, 1], kv_lens=[1],
                   dtype=np.uint16)
    p = mv.Plan(num_heads=2, d_latent=16, d_rope=8, softmax_scale=1.0, dtype="f16",
                page_size=4, q_indptr=case["q_indptr"], kv_lens=case["kv_lens"], max_pages=3,
                backend="cpu")
    with pytest.raises(mv.InvalidArgumentError, match="plan's dtype f16 needs float16"):
        p.run(bits, case["kv_cache"], case["page_table"])


def test_bad_input_closed_plan(case):
    p = plan_for(case, "cpu")
    p.close()
    p.close()  # twice is fine
    with pytest.raises(mv.InvalidArgumentError, match="the plan is closed"):
        p.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])


def test_bad_input_helpers():
    with pytest.raises(mv.InvalidArgumentError, match="parents"):
        mv.tree_mask_from_parents([-1, 5, 0])
    with pytest.raises(mv.InvalidArgumentError):
        mv.accept_greedy([-1, 0], [1, 2], [3])
    with pytest.raises(mv.InvalidArgumentError, match="do not match"):
        mv.merge_states([np.zeros((2, 3), np.float32), np.zeros((2, 4), np.float32)],
                        [np.zeros(2, np.float32), np.zeros(2, np.float32)])
    with pytest.raises(mv.InvalidArgumentError, match="float32"):
        mv.merge_states([np.zeros((2, 3))], [np.zeros(2)])



@pytest.mark.parametrize("field", ["num_heads", "d_latent", "d_rope", "page_size", "max_pages"])
@pytest.mark.parametrize("value", [2**32 + 4, 2**31, -2**31 - 1, 2**64 + 2])
def test_bad_input_int_fields_out_of_range(field, value):
    """An integer field that does not fit the C struct's int32 is refused before ctypes can wrap
    it (2**32 + 4 used to reach C as 4 and plan a 4-head problem)."""
    fields = dict(num_heads=2, d_latent=8, d_rope=0, softmax_scale=1.0, dtype="f32",
                  page_size=4, max_pages=1, q_indptr=[0, 1], kv_lens=[1])
    fields[field] = value
    with pytest.raises(mv.InvalidArgumentError, match="%s = %d does not fit the C field's int32"
                       % (field, value)) as e:
        mv.Plan(backend="cpu", **fields)
    assert e.value.status_name == "MLAV_ERR_INVALID_ARG"
    with pytest.raises(ValueError):
        mv.Problem(**fields)


def test_bad_input_int_args_out_of_range():
    with pytest.raises(mv.InvalidArgumentError, match="max_q_len = 4294967297 does not fit"):
        mv.tree_mask_words(2**32 + 1)
    with pytest.raises(mv.InvalidArgumentError, match="words = 4294967297 does not fit"):
        mv.tree_mask_from_parents([-1, 0], words=2**32 + 1)
    for bad in ("x", "2", 2.0, 2.5, True):  # never converted: int(2.5) would plan 2 heads
        with pytest.raises(mv.InvalidArgumentError, match="num_heads = .* must be an integer"):
            mv.Problem(num_heads=bad, softmax_scale=1.0, q_indptr=[0, 1], kv_lens=[1])


def test_bad_input_outputs_alias_inputs(plan, case):
    """out or lse overlapping an input (or each other) is refused by the library with its
    sentence, and nothing is written (the cpu backend used to give a wrong answer)."""
    T, H, Dl, W = case["T"], case["H"], case["Dl"], case["Dl"] + case["Dr"]
    q = case["q"].copy()
    kv = case["kv_cache"].copy()
    q0, kv0 = q.copy(), kv.copy()
    lse = np.full((T, H), 7.0, np.float32)
    # out as a view of q's first T*H*Dl floats (q is [T, H, W] with W > Dl)
    out_in_q = q.reshape(-1)[:T * H * Dl].reshape(T, H, Dl)
    with pytest.raises(mv.InvalidArgumentError, match="tensors.out .* overlaps tensors.q"):
        plan.run(q, kv, case["page_table"], case["tree_mask"], out=out_in_q, lse=lse)
    out_in_kv = kv.reshape(-1)[W:W + T * H * Dl].reshape(T, H, Dl)
    with pytest.raises(mv.InvalidArgumentError, match="tensors.out .* overlaps tensors.kv_cache"):
        plan.run(q, kv, case["page_table"], case["tree_mask"], out=out_in_kv, lse=lse)
    out = np.full((T, H, Dl), 7.0, np.float32)
    lse_in_out = out.reshape(-1)[:T * H].reshape(T, H)
    with pytest.raises(mv.InvalidArgumentError, match="tensors.out .* overlaps tensors.lse"):
        plan.run(q, kv, case["page_table"], case["tree_mask"], out=out, lse=lse_in_out)
    lse_in_q = q.reshape(-1)[:T * H].reshape(T, H)
    with pytest.raises(mv.InvalidArgumentError, match="tensors.lse .* overlaps tensors.q"):
        plan.run(q, kv, case["page_table"], case["tree_mask"], out=out, lse=lse_in_q)
    assert np.array_equal(q, q0, equal_nan=True) and np.array_equal(kv, kv0, equal_nan=True), \
        "an input was written"
    assert np.all(lse == 7.0)
    assert np.all(out == 7.0)
