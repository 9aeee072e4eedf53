"""Engine steps from Python: StepPlan (one plan for limits, new lengths every step) and its torch
op (the SGLang backend on it: test_sglang_backend.py, test_sglang_conformance.py). CPU paths run
everywhere (numpy; CPU torch when torch imports); the CUDA-graph tests skip without a CUDA build
and device."""
import numpy as np
import pytest

import mlaverify as mv
from mlaverify.steps import StepPlan
from mlav_testutil import make_parents

H, DL, DR = 4, 64, 16
W = DL + DR
SCALE = 0.125
TOL = 1e-5


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _cuda_ready():
    torch = _torch()
    return (torch is not None and torch.cuda.is_available() and mv.backend_compiled("cuda")
            and mv.cuda_device_count() > 0)


class Engine:
    """A toy engine: max_batch slots, each with its own pages; requests arrive, grow by their
    accepted drafts and finish; every step is a random padded batch of random trees."""

    def __init__(self, rng, *, max_batch, max_tokens, max_q_len, max_kv_len, page_size):
        self.rng = rng
        self.B, self.T, self.Q, self.K, self.ps = max_batch, max_tokens, max_q_len, max_kv_len, \
            page_size
        self.P = -(-max_kv_len // page_size)
        npages = max_batch * self.P + 1
        self.pool = rng.uniform(-1, 1, (npages, page_size, W)).astype(np.float32)
        perm = rng.permutation(npages).astype(np.int32)
        self.slot_pages = perm[:max_batch * self.P].reshape(max_batch, self.P)
        self.prefix = {}  # slot -> prefix length of the request living there

    def step(self):
        rng = self.rng
        for s in list(self.prefix):                          # some finish
            if rng.random() < 0.15:
                del self.prefix[s]
        for s in range(self.B):                              # some arrive
            if s not in self.prefix and rng.random() < 0.3:
                self.prefix[s] = int(rng.integers(0, self.K // 2))
        batch = int(rng.integers(1, self.B + 1))
        live = [s for s in self.prefix if rng.random() < 0.9]
        rng.shuffle(live)
        live = live[:batch]
        entries = live + [None] * (batch - len(live))        # None: padding (q_len 0)
        rng.shuffle(entries)
        q_lens, kv_lens, parents, rows, slots, budget = [], [], [], [], [], self.T
        for s in entries:
            if s is None or budget == 0:
                q_lens.append(0)
                kv_lens.append(int(rng.integers(0, 3)))
                slots.append(int(rng.integers(0, self.B)))
                rows.append(self.slot_pages[slots[-1]])
                continue
            room = self.K - self.prefix[s]
            n = int(rng.integers(1, min(self.Q, budget, room) + 1)) if room > 0 else 0
            if n == 0:
                q_lens.append(0)
                kv_lens.append(0)
            else:
                q_lens.append(n)
                kv_lens.append(self.prefix[s] + n)
                parents.append(make_parents(rng, n, rng.choice(["chain", "bushy", "random"])))
                budget -= n
            rows.append(self.slot_pages[s])
            slots.append(s)
        for s in live:                                       # accepted drafts join the prefix
            self.prefix[s] = min(self.prefix[s] + int(rng.integers(1, 4)), self.K - 1)
        q_indptr = np.zeros(batch + 1, np.int32)
        q_indptr[1:] = np.cumsum(q_lens)
        page_table = np.full((self.B, self.P), self.slot_pages[0, 0], np.int32)
        page_table[:batch] = np.array(rows, np.int32)
        # the same rows as a table shared by the slots (the engine's req_to_token, with spare
        # rows of other pages after them) and each request's row in it
        slot_rows = np.zeros(self.B, np.int32)  # past the batch: a valid row, unused
        slot_rows[:batch] = slots
        return dict(batch=batch, q_indptr=q_indptr, kv_lens=np.array(kv_lens, np.int32),
                    q_lens=np.array(q_lens, np.int32), parents=parents, page_table=page_table,
                    slot_rows=slot_rows)


def _step_inputs(eng, st, words, rng, heads=H, width=W):
    """q and tree mask buffers of the limits' shape: the step's rows, then poison."""
    T = int(st["q_indptr"][-1])
    q = np.full((eng.T, heads, width), np.nan, np.float32)
    q[:T] = rng.uniform(-2, 2, (T, heads, width))
    mask = np.full((eng.T, words), 0xFFFFFFFF, np.uint32)
    if T:
        keep = st["q_lens"] > 0
        qi = np.zeros(int(keep.sum()) + 1, np.int32)
        qi[1:] = np.cumsum(st["q_lens"][keep])
        mask[:T] = mv.tree_mask_from_parents(np.concatenate(st["parents"]), qi, words=words)
    return q, mask, T


def _reference(eng, st, q, T):
    """The step's exact problem (padding dropped) on the fp64 oracle backend."""
    keep = st["q_lens"] > 0
    qi = np.zeros(int(keep.sum()) + 1, np.int32)
    qi[1:] = np.cumsum(st["q_lens"][keep])
    pt = np.ascontiguousarray(st["page_table"][:st["batch"]][keep])
    mask = mv.tree_mask_from_parents(np.concatenate(st["parents"]), qi)
    return mv.verify(np.ascontiguousarray(q[:T]), eng.pool, pt, mask, q_indptr=qi,
                     kv_lens=st["kv_lens"][keep], softmax_scale=SCALE, d_latent=DL,
                     dtype="f32", backend="reference")


def _engine_loop(seed, steps, page_size, as_torch, shared=False):
    """Random engine steps on a CPU StepPlan against the reference backend; `shared`: the
    page table is the engine's table of every slot (more rows than the step's requests, in
    no request order) with page_table_rows naming each request's row."""
    rng = np.random.default_rng(seed)
    eng = Engine(rng, max_batch=8, max_tokens=96, max_q_len=40, max_kv_len=160,
                 page_size=page_size)
    if shared:
        spare = rng.integers(0, eng.pool.shape[0], (5, eng.P)).astype(np.int32)
        table = np.concatenate([eng.slot_pages, spare]).astype(np.int32)
    plan = StepPlan(H, SCALE, "f32", page_size, eng.P, eng.B, eng.T, eng.Q, eng.K,
                    d_latent=DL, d_rope=DR, backend="cpu")
    assert plan.limits == dict(max_batch=8, max_tokens=96, max_q_len=40, max_kv_len=160)
    assert plan.mask_words == 2 and plan.backend == "cpu" and plan.device is None
    plan.workspace[:] = 0xFF  # poisoned at creation: update must write all it reads
    conv = (lambda a: a) if not as_torch else (
        lambda a: _torch().from_numpy(a.view(np.int32) if a.dtype == np.uint32 else a))
    pool = conv(eng.pool)
    checked = 0
    for _ in range(steps):
        st = eng.step()
        q, mask, T = _step_inputs(eng, st, plan.mask_words, rng)
        plan.update(conv(st["q_indptr"]), conv(st["kv_lens"]))
        assert plan.step_status() == -1
        out0, lse0 = plan.output_buffers(conv(q))
        out0[:] = 7.0
        lse0[:] = 7.0
        if shared:
            out, lse = plan.run(conv(q), pool, conv(table), conv(mask),
                                page_table_rows=conv(st["slot_rows"]))
        else:
            out, lse = plan.run(conv(q), pool, conv(st["page_table"]), conv(mask))
        assert out is out0 and lse is lse0  # the plan's fixed buffers
        out, lse = np.asarray(out), np.asarray(lse)
        assert np.all(out[T:] == 7.0) and np.all(lse[T:] == 7.0), "rows past the step written"
        if T:
            ro, rl = _reference(eng, st, q, T)
            assert rel_l2(out[:T], ro) <= TOL and rel_l2(lse[:T], rl) <= TOL
            checked += 1
    assert checked >= steps * 0.8
    plan.close()


@pytest.mark.parametrize("backend", ["cpu", "reference"])
def test_steps_plan_and_step_plan_same_bits(seed, backend):
    """One plan path: a Plan of a step's exact problem and a StepPlan updated with the same
    lengths give the same bits on the CPU backends (the library's exact plan is a plan for
    limits whose update ran at plan time)."""
    rng = np.random.default_rng(seed)
    eng = Engine(rng, max_batch=8, max_tokens=96, max_q_len=40, max_kv_len=160, page_size=4)
    splan = StepPlan(H, SCALE, "f32", 4, eng.P, eng.B, eng.T, eng.Q, eng.K, d_latent=DL,
                     d_rope=DR, backend=backend)
    compared = 0
    for _ in range(8):
        st = eng.step()
        q, mask, T = _step_inputs(eng, st, splan.mask_words, rng)
        keep = st["q_lens"] > 0
        if not T:
            continue
        qi = np.zeros(int(keep.sum()) + 1, np.int32)
        qi[1:] = np.cumsum(st["q_lens"][keep])
        kv = np.ascontiguousarray(st["kv_lens"][keep], np.int32)
        pt = np.ascontiguousarray(st["page_table"][:st["batch"]][keep])
        pt_full = np.zeros((eng.B, eng.P), np.int32)
        pt_full[:pt.shape[0]] = pt
        plan = mv.Plan(num_heads=H, softmax_scale=SCALE, dtype="f32", page_size=4,
                       q_indptr=qi, kv_lens=kv, max_pages=eng.P, d_latent=DL, d_rope=DR,
                       backend=backend)
        xmask = mv.tree_mask_from_parents(np.concatenate(st["parents"]), qi)
        xo, xl = plan.run(np.ascontiguousarray(q[:T]), eng.pool, pt, xmask)
        plan.close()
        splan.update(qi, kv)
        so, sl = splan.run(q, eng.pool, pt_full, mask)
        assert np.array_equal(np.asarray(so)[:T], xo) and np.array_equal(np.asarray(sl)[:T], xl)
        compared += 1
    assert compared >= 4
    splan.close()


def test_steps_engine_loop_numpy(seed):
    _engine_loop(seed, 200, page_size=4, as_torch=False)


def test_steps_engine_loop_torch_cpu(seed):
    if _torch() is None:
        pytest.skip("torch is not importable")
    _engine_loop(seed, 60, page_size=1, as_torch=True)


def test_steps_engine_loop_shared_page_table(seed):
    """page_table_rows on a plan for limits: the engine's table of every slot plus spare rows,
    each request's row named, against the reference backend on the gathered rows."""
    _engine_loop(seed, 120, page_size=4, as_torch=False, shared=True)
    if _torch() is not None:
        _engine_loop(seed + 1, 40, page_size=1, as_torch=True, shared=True)


def _small_plan(**kw):
    args = dict(num_heads=H, softmax_scale=SCALE, dtype="f32", page_size=1, max_pages=32,
                max_batch=4, max_tokens=16, max_q_len=8, max_kv_len=32, d_latent=DL,
                d_rope=DR, backend="cpu")
    args.update(kw)
    return StepPlan(**args)


@pytest.mark.parametrize("q_indptr, kv_lens, batch, words", [
    ([0, 3, 5], [2, 4], None, "less than q_len"),             # kv_len < q_len
    ([1, 3, 5], [4, 4], None, "q_indptr[0]"),                 # q_indptr[0] != 0
    ([0, 9, 10], [9, 4], None, "max_q_len"),                  # q_len > max_q_len
    ([0, 3, 5], [33, 4], None, "max_kv_len"),                 # kv_len > max_kv_len
    ([0, 5, 3], [5, 4], None, ""),                            # q_indptr decreases
    ([0, 8, 16, 17], [8, 8, 1], None, "max_tokens"),          # tokens past max_tokens
])
def test_steps_bad_host_lengths_raise_with_the_sentence(q_indptr, kv_lens, batch, words):
    plan = _small_plan()
    with pytest.raises(mv.InvalidArgumentError) as e:
        plan.update(q_indptr, kv_lens, batch=batch)
    assert e.value.status_name == "MLAV_ERR_INVALID_ARG" and e.value.sentence
    assert words in e.value.sentence, e.value.sentence


@pytest.mark.parametrize("kw, words", [
    (dict(q_indptr=[0, 1, 2, 3, 4, 5, 6], kv_lens=[1] * 6), "batch = 6 is outside [0, 4]"),
    (dict(q_indptr=[0, 1], kv_lens=[1, 1]), "needs q_indptr"),
    (dict(q_indptr=[0, 1], kv_lens=[1], batch=-1), "batch = -1"),
    (dict(q_indptr=[0, 1], kv_lens=[1], batch=2**31), "batch = 2147483648"),
    (dict(q_indptr=[0, 1], kv_lens=[2**31]), "does not fit int32"),
    (dict(q_indptr=[0.5, 1], kv_lens=[1]), "integers"),
    (dict(q_indptr=[0, 1], kv_lens=[1], batch=1.5), "must be an integer"),
])
def test_steps_binding_checks_lengths_before_ctypes(kw, words):
    plan = _small_plan()
    with pytest.raises(ValueError) as e:
        plan.update(**kw)
    assert words in str(e.value), str(e.value)


@pytest.mark.parametrize("kw, words", [
    (dict(max_pages=2**31), "max_pages = 2147483648 does not fit the C field's int32"),
    (dict(max_batch=-2**31 - 1), "max_batch"),
    (dict(num_heads=True), "must be an integer"),
    (dict(max_tokens=16.0), "must be an integer"),
    (dict(max_batch=0), "limits.max_batch = 0"),                # the library's sentence
    (dict(max_q_len=17), "limits.max_q_len = 17"),
    (dict(max_kv_len=4), "max_kv_len = 4"),
])
def test_steps_plan_arguments_checked(kw, words):
    with pytest.raises((ValueError, mv.MlavError)) as e:
        _small_plan(**kw)
    assert words in str(e.value), str(e.value)


def test_steps_limits_max_batch():
    """The batch limit is the library's query, and a plan at it is made, one past it refused."""
    n = mv.limits_max_batch()
    assert n == 2048
    _small_plan(max_batch=n).close()
    with pytest.raises(mv.InvalidArgumentError, match="limits.max_batch = %d" % (n + 1)):
        _small_plan(max_batch=n + 1)


def test_steps_run_checks_shapes_and_places():
    plan = _small_plan()
    plan.update([0, 2], [5])
    q = np.zeros((16, H, W), np.float32)
    pool = np.zeros((40, 1, W), np.float32)
    pt = np.zeros((4, 32), np.int32)
    out, lse = plan.run(q, pool, pt)                       # causal chain, own buffers
    assert out.shape == (16, H, DL) and lse.shape == (16, H)
    with pytest.raises(mv.InvalidArgumentError, match="q has shape"):
        plan.run(q[:8], pool, pt)
    with pytest.raises(mv.InvalidArgumentError, match="page_table has shape"):
        plan.run(q, pool, pt[:2])
    with pytest.raises(mv.InvalidArgumentError, match="tree_mask has shape"):
        plan.run(q, pool, pt, np.zeros((16, 2), np.uint32))
    with pytest.raises(mv.InvalidArgumentError, match="dtype"):
        plan.run(q.astype(np.float16), pool, pt)
    with pytest.raises(mv.InvalidArgumentError, match="kv_cache has shape"):
        plan.run(q, pool.reshape(20, 2, W), pt)
    with pytest.raises(mv.InvalidArgumentError, match="page_table\\[0\\]"):
        plan.run(q, pool[:3], pt + 7)                       # the library's page check
    plan.close()
    with pytest.raises(mv.InvalidArgumentError, match="closed"):
        plan.update([0, 1], [1])


def test_steps_run_torch_checks_shapes_and_places(seed):
    """CPU torch tensors take the fast path (checks by identity); every input it does not
    take raises the same sentence as the full checks, and its results are the numpy path's."""
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not importable")
    rng = np.random.default_rng(seed)
    plan = _small_plan()
    plan.update(torch.tensor([0, 2, 5], dtype=torch.int32), torch.tensor([5, 9], dtype=torch.int32))
    qn = rng.uniform(-1, 1, (16, H, W)).astype(np.float32)
    pooln = rng.uniform(-1, 1, (40, 1, W)).astype(np.float32)
    ptn = rng.integers(0, 40, (4, 32)).astype(np.int32)
    mn = np.zeros((16, 1), np.uint32)
    mn[:5] = mv.tree_mask_from_parents([-1, 0, -1, 0, 1], [0, 2, 5])
    want_o, want_l = (x.copy() for x in plan.run(qn, pooln, ptn, mn))
    q, pool, pt = torch.from_numpy(qn), torch.from_numpy(pooln), torch.from_numpy(ptn)
    mask = torch.from_numpy(mn.view(np.int32))
    out, lse = torch.zeros((16, H, DL)), torch.zeros((16, H))
    o, l = plan.run(q, pool, pt, mask, out=out, lse=lse)
    assert o is out and l is lse
    assert np.array_equal(o[:5].numpy(), want_o[:5]) and np.array_equal(l[:5].numpy(), want_l[:5])
    o2, l2 = plan.run(q, pool, pt, mask)  # the plan's own torch buffers, made once
    assert plan.run(q, pool, pt, mask)[0] is o2 and torch.equal(o2[:5], o[:5])
    bad = [
        (dict(q=q[:8]), "q has shape"),
        (dict(q=q.double()), "q has dtype float64"),
        (dict(q=q.transpose(0, 1).contiguous().transpose(0, 1)), "not contiguous"),
        (dict(pool=pool.view(20, 2, W)), "kv_cache has shape"),
        (dict(pool=pool.half()), "kv_cache has dtype float16"),
        (dict(pt=pt[:2]), "page_table has shape"),
        (dict(pt=pt.long()), "page_table has dtype int64"),
        (dict(mask=mask[:, :0]), "tree_mask has shape"),
        (dict(mask=mask.to(torch.int16)), "tree_mask has dtype int16"),
        (dict(out=out[:8]), "out has shape"),
        (dict(out=out.double()), "out has dtype float64"),
        (dict(out=torch.zeros((16, H, DL), requires_grad=True)), "requires grad"),
        (dict(lse=lse.double()), "lse has dtype float64"),
        (dict(lse=np.zeros((16, H), np.float32)), ""),  # numpy beside torch: fine, both host
        (dict(q=q.to("meta")), "meta"),
        (dict(pt=[[0] * 32] * 4), "must be a numpy array or a torch tensor"),
        (dict(pt=pt + 100), "page_table[0]"),  # the library's page check, through the fast path
    ]
    for change, words in bad:
        args = dict(q=q, pool=pool, pt=pt, mask=mask, out=out, lse=lse)
        args.update(change)
        if not words:
            plan.run(args["q"], args["pool"], args["pt"], args["mask"], out=args["out"],
                     lse=args["lse"])
            continue
        with pytest.raises(mv.InvalidArgumentError) as e:
            plan.run(args["q"], args["pool"], args["pt"], args["mask"], out=args["out"],
                     lse=args["lse"])
        assert words in str(e.value), (change, str(e.value))
    plan.close()
    with pytest.raises(mv.InvalidArgumentError, match="closed"):
        plan.run(q, pool, pt, mask, out=out, lse=lse)


def test_steps_update_takes_any_host_lengths():
    """int32 numpy / CPU torch lengths are used in place; other ints are converted (checked)."""
    torch = _torch()
    plan = _small_plan()
    q = np.zeros((16, H, W), np.float32)
    pool = np.ones((40, 1, W), np.float32)
    pt = np.zeros((4, 32), np.int32)
    kinds = [([0, 2, 5], [5, 9]), (np.array([0, 2, 5], np.int64), np.array([5, 9], np.int16)),
             (np.array([0, 9, 2, 9, 5])[::2], np.array([5, 9]))]
    if torch is not None:
        kinds += [(torch.tensor([0, 2, 5], dtype=torch.int32), torch.tensor([5, 9])),
                  (torch.tensor([0, 9, 2, 9, 5], dtype=torch.int32)[::2],
                   torch.tensor([5, 9], dtype=torch.int32))]
    for qi, kv in kinds:
        plan.update(qi, kv)
        assert plan.step_status() == -1
        out, _ = plan.run(q, pool, pt)
        assert np.allclose(out[:5], 1.0)
    with pytest.raises(mv.InvalidArgumentError, match="less than q_len"):
        plan.update(np.array([0, 2, 5], np.int32), np.array([1, 9], np.int32))
    if torch is not None:
        with pytest.raises(mv.InvalidArgumentError, match="1-D"):
            plan.update(torch.zeros((1, 3), dtype=torch.int32), torch.zeros(2, dtype=torch.int32))


def test_steps_fp8_kv_arguments():
    """kv_dtype / kv_scale follow Plan's rule (mlaverify.api.kv_dtype_name, kv_scale_arg): the
    q dtype said again is that dtype; a scale on a cache that is not FP8 is refused, as is an
    FP8 run without one."""
    plan = _small_plan(kv_dtype="float32")  # the q dtype said again
    assert plan.kv_dtype == "f32"
    q = np.zeros((16, H, W), np.float32)
    pool = np.ones((40, 1, W), np.float32)
    pt = np.zeros((4, 32), np.int32)
    plan.update([0, 2], [5])
    for scale in (0.5, np.array([0.5], np.float32), 1):
        with pytest.raises(mv.InvalidArgumentError, match="kv_scale is the scale of an FP8"):
            plan.run(q, pool, pt, kv_scale=scale)
    assert np.allclose(plan.run(q, pool, pt)[0][:2], 1.0)
    fp8 = _small_plan(kv_dtype="fp8_e4m3")
    assert fp8.kv_dtype == "fp8_e4m3"
    fp8.update([0, 2], [5])
    with pytest.raises(mv.InvalidArgumentError, match="kv_cache has dtype float32"):
        fp8.run(q, pool, pt, kv_scale=1.0)
    e4m3_one = np.full((40, 1, W), 0x38, np.uint8)
    with pytest.raises(mv.InvalidArgumentError, match="needs kv_scale"):
        fp8.run(q, e4m3_one, pt)
    assert np.allclose(fp8.run(q, e4m3_one, pt, kv_scale=0.5)[0][:2], 0.5)


def test_steps_overhead_tool_runs():
    """python -m mlaverify.overhead (few calls: that it runs and reports every path)."""
    from mlaverify import overhead
    res = overhead.measure(calls=3, repeats=2)
    assert res["bare"] > 0 and res["steps_numpy"] > 0
    if _torch() is not None:
        assert {"steps_torch", "sglang", "sglang_metadata_qlen"} <= set(res)
    lines = overhead.report(res)
    assert lines[0].startswith("per layer") and any("per step" in x for x in lines)


def test_steps_torch_op_cpu(seed):
    torch = _torch()
    if torch is None:
        pytest.skip("torch is not importable")
    from mlaverify import torch_ops
    if not torch_ops.REGISTERED:
        pytest.skip("mlaverify::verify_step not registered: " + torch_ops.HOW)
    rng = np.random.default_rng(seed)
    plan = _small_plan()
    plan.update([0, 3, 3, 8], [10, 0, 20], batch=3)
    q = torch.from_numpy(rng.uniform(-1, 1, (16, H, W)).astype(np.float32))
    pool = torch.from_numpy(rng.uniform(-1, 1, (64, 1, W)).astype(np.float32))
    pt = torch.from_numpy(rng.integers(0, 64, (4, 32)).astype(np.int32))
    m = np.zeros((16, 1), np.uint32)
    m[:8] = mv.tree_mask_from_parents([-1, 0, 0, -1, 0, 1, 2, 3], [0, 3, 8])
    mask = torch.from_numpy(m.view(np.int32))
    want_o, want_l = plan.run(q, pool, pt, mask)
    want_o, want_l = want_o.clone(), want_l.clone()
    o, l = torch_ops.verify_step(plan, q, pool, pt, mask)
    assert o is not want_o and torch.equal(o[:8], want_o[:8]) and torch.equal(l[:8], want_l[:8])
    o2, l2 = torch.ops.mlaverify.verify_step(q, pool, pt, None, plan.id, DL)
    assert o2.shape == (16, H, DL)
    mo, ml = torch.ops.mlaverify.verify_step(q.to("meta"), pool.to("meta"), pt.to("meta"),
                                             mask.to("meta"), plan.id, DL)
    assert mo.shape == (16, H, DL) and mo.device.type == "meta" and ml.shape == (16, H)
    assert ml.dtype == torch.float32


# -- CUDA: one graph of update (device lengths) + runs, replayed every step -----------------------

@pytest.mark.skipif(not _cuda_ready(), reason="needs torch with CUDA, a CUDA build and a device")
@pytest.mark.parametrize("backend", ["cuda", "cuda-naive"])
def test_steps_cuda_graph_update_and_layers(seed, backend):
    import torch
    rng = np.random.default_rng(seed)
    Hc, Dl, Dr, layers = 8, 512, 64, 3
    Wc = Dl + Dr
    eng = Engine(rng, max_batch=8, max_tokens=96, max_q_len=16, max_kv_len=256, page_size=1)
    dev = torch.device("cuda", torch.cuda.current_device())
    plan = StepPlan(Hc, SCALE, "bf16", 1, eng.P, eng.B, eng.T, eng.Q, eng.K, d_latent=Dl,
                    d_rope=Dr, backend=backend, device=dev)
    assert plan.backend == backend
    assert plan.workspace_memory == "device" and plan.device == dev.index
    plan.workspace.fill_(0xFF)
    pools = [torch.from_numpy(rng.uniform(-1, 1, (eng.pool.shape[0], 1, Wc)).astype(np.float32))
             .to(torch.bfloat16) for _ in range(layers)]
    pools_d = [p.to(dev) for p in pools]
    qi = torch.zeros(eng.B + 1, dtype=torch.int32, device=dev)
    kvl = torch.zeros(eng.B, dtype=torch.int32, device=dev)
    pt = torch.zeros((eng.B, eng.P), dtype=torch.int32, device=dev)
    mask = torch.zeros((eng.T, plan.mask_words), dtype=torch.int32, device=dev)
    qs = [torch.zeros((eng.T, Hc, Wc), dtype=torch.bfloat16, device=dev) for _ in range(layers)]
    outs = [torch.zeros((eng.T, Hc, Dl), dtype=torch.bfloat16, device=dev)
            for _ in range(layers)]
    lses = [torch.zeros((eng.T, Hc), dtype=torch.float32, device=dev) for _ in range(layers)]

    def load(st):
        B = st["batch"]
        qi.zero_()
        kvl.zero_()
        qi[:B + 1].copy_(torch.from_numpy(st["q_indptr"]))
        qi[B + 1:] = int(st["q_indptr"][-1])
        kvl[:B].copy_(torch.from_numpy(st["kv_lens"]))
        pt.copy_(torch.from_numpy(st["page_table"]))
        q_np = []
        for li in range(layers):
            q, m, T = _step_inputs(eng, st, plan.mask_words, rng, Hc, Wc)
            q[T:] = 0
            qb = torch.from_numpy(q).to(torch.bfloat16)
            qs[li].copy_(qb)
            q_np.append(qb)
        mask.copy_(torch.from_numpy(m.view(np.int32)))
        return q_np, T

    def body():
        plan.update(qi, kvl, batch=eng.B)  # a fixed batch: the steps pad with q_len 0
        for li in range(layers):
            plan.run(qs[li], pools_d[li], pt, mask, out=outs[li], lse=lses[li])

    def padded(st):
        B = st["batch"]
        for k in ("q_lens", "kv_lens"):
            st[k] = np.concatenate([st[k], np.zeros(eng.B - B, np.int32)])
        st["q_indptr"] = np.concatenate([st["q_indptr"],
                                         np.full(eng.B - B, st["q_indptr"][-1], np.int32)])
        st["batch"] = eng.B
        return st

    st = padded(eng.step())
    load(st)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    for _ in range(30):
        st = padded(eng.step())
        q_np, T = load(st)
        g.replay()
        torch.cuda.synchronize()
        assert plan.step_status() == -1
        if not T:
            continue
        keep = st["q_lens"] > 0
        qix = np.zeros(int(keep.sum()) + 1, np.int32)
        qix[1:] = np.cumsum(st["q_lens"][keep])
        ptx = torch.from_numpy(np.ascontiguousarray(st["page_table"][keep]))
        tm = torch.from_numpy(mv.tree_mask_from_parents(np.concatenate(st["parents"]), qix)
                              .view(np.int32))
        for li in range(layers):
            # the fp64 oracle on the BF16 inputs' exact values (f32 holds every BF16 value)
            ro, rl = mv.verify(q_np[li][:T].float().contiguous(), pools[li].float(), ptx, tm,
                               q_indptr=qix, kv_lens=st["kv_lens"][keep], softmax_scale=SCALE,
                               d_latent=Dl, dtype="f32", backend="reference")
            assert rel_l2(outs[li][:T].float().cpu().numpy(), ro.numpy()) <= 5e-3
            assert np.max(np.abs(lses[li][:T].cpu().numpy() - rl.numpy())) <= 1e-3
    # a refused request (kv_len < q_len) is skipped and reported after the step
    qi.fill_(1)
    qi[0] = 0
    kvl.zero_()  # request 0: q_len 1, kv_len 0
    g.replay()
    torch.cuda.synchronize()
    with pytest.raises(mv.InvalidArgumentError):
        plan.step_status()
    del g
    plan.close()


@pytest.mark.parametrize("backend", ["cuda", "cuda-naive"])
def test_steps_cuda_refused_request_index(seed, backend):
    """Device lengths that break the rules skip their request; the binding reports its index as
    an int (refused_request(), StepStatusError.bad_request). A fresh CUDA StepPlan (zeroed
    workspace, empty step) reports -1; a shared page table (page_table_rows) there gives the
    numbers of the gathered table."""
    if not _cuda_ready():
        pytest.skip("needs torch with CUDA, a CUDA build and a device")
    import torch
    from mlaverify import StepStatusError
    rng = np.random.default_rng(seed)
    dev = torch.device("cuda", torch.cuda.current_device())
    Dl, Dr = 512, 64  # the flash kernel's dims: a plan for limits runs on it
    Wd = Dl + Dr
    plan = StepPlan(H, SCALE, "f32", 1, 32, 4, 16, 8, 32, d_latent=Dl, d_rope=Dr,
                    backend=backend, device=dev)
    assert plan.step_status() == -1 and plan.refused_request() == -1
    i32 = dict(dtype=torch.int32, device=dev)
    plan.update(torch.tensor([0, 2, 5, 6], **i32), torch.tensor([4, 2, 9], **i32))  # 1: kv < q
    assert plan.refused_request() == 1
    with pytest.raises(StepStatusError) as e:
        plan.step_status()
    assert e.value.bad_request == 1 and "request 1" in e.value.sentence
    plan.update(torch.tensor([0, 2, 1, 6], **i32), torch.tensor([4, 9, 9], **i32))  # q_indptr
    assert plan.refused_request() == 3
    plan.update(torch.tensor([0, 2, 5, 6], **i32), torch.tensor([4, 9, 9], **i32))
    assert plan.step_status() == -1 and plan.refused_request() == -1
    pool = torch.from_numpy(rng.uniform(-1, 1, (256, 1, Wd)).astype(np.float32)).to(dev)
    table = torch.from_numpy(rng.permutation(256)[:7 * 32].reshape(7, 32).astype(np.int32))
    rows = torch.tensor([5, 0, 3, 6], dtype=torch.int32)
    q = torch.from_numpy(rng.uniform(-1, 1, (16, H, Wd)).astype(np.float32)).to(dev)
    o1, l1 = (x.clone() for x in plan.run(q, pool, table.to(dev), None,
                                          page_table_rows=rows.to(dev)))
    o2, l2 = plan.run(q, pool, table[rows.long()].contiguous().to(dev), None)
    torch.cuda.synchronize()
    assert torch.equal(o1[:6], o2[:6]) and torch.equal(l1[:6], l2[:6])


def test_steps_cuda_naive_any_dims(seed):
    """cuda-naive's plan for limits at dims the flash kernel does not take (Dl 64, Dr 16, f32):
    random engine steps of device lengths (padding among them) against the fp64 oracle, rows
    past the step's tokens left as they were, and the same bits as cuda-naive's plan for the
    step's exact problem."""
    if not _cuda_ready():
        pytest.skip("needs torch with CUDA, a CUDA build and a device")
    import torch
    rng = np.random.default_rng(seed)
    dev = torch.device("cuda", torch.cuda.current_device())
    eng = Engine(rng, max_batch=8, max_tokens=96, max_q_len=40, max_kv_len=160, page_size=4)
    plan = StepPlan(H, SCALE, "f32", 4, eng.P, eng.B, eng.T, eng.Q, eng.K, d_latent=DL,
                    d_rope=DR, backend="cuda-naive", device=dev)
    assert plan.backend == "cuda-naive"
    pool = torch.from_numpy(eng.pool).to(dev)
    checked = 0
    for _ in range(12):
        st = eng.step()
        q, mask, T = _step_inputs(eng, st, plan.mask_words, rng)
        i32 = dict(dtype=torch.int32, device=dev)
        plan.update(torch.tensor(st["q_indptr"], **i32), torch.tensor(st["kv_lens"], **i32))
        out = torch.full((eng.T, H, DL), 7.0, device=dev)
        lse = torch.full((eng.T, H), 7.0, device=dev)
        plan.run(torch.from_numpy(q).to(dev), pool, torch.from_numpy(st["page_table"]).to(dev),
                 torch.from_numpy(mask.view(np.int32)).to(dev), out=out, lse=lse)
        assert plan.step_status() == -1
        out, lse = out.cpu().numpy(), lse.cpu().numpy()
        assert np.all(out[T:] == 7.0) and np.all(lse[T:] == 7.0), "rows past the step written"
        if not T:
            continue
        ro, rl = _reference(eng, st, q, T)
        assert rel_l2(out[:T], ro) <= TOL and rel_l2(lse[:T], rl) <= TOL
        keep = st["q_lens"] > 0
        qi = np.zeros(int(keep.sum()) + 1, np.int32)
        qi[1:] = np.cumsum(st["q_lens"][keep])
        xplan = mv.Plan(num_heads=H, softmax_scale=SCALE, dtype="f32", page_size=4,
                        q_indptr=qi, kv_lens=st["kv_lens"][keep], max_pages=eng.P, d_latent=DL,
                        d_rope=DR, backend="cuda-naive", device=dev)
        xmask = mv.tree_mask_from_parents(np.concatenate(st["parents"]), qi)
        pt = np.ascontiguousarray(st["page_table"][:st["batch"]][keep])
        xo, xl = xplan.run(torch.from_numpy(np.ascontiguousarray(q[:T])).to(dev), pool,
                           torch.from_numpy(pt).to(dev),
                           torch.from_numpy(xmask.view(np.int32)).to(dev))
        xplan.close()
        assert np.array_equal(xo.cpu().numpy(), out[:T]) and \
            np.array_equal(xl.cpu().numpy(), lse[:T])
        checked += 1
    assert checked >= 8
    plan.close()
