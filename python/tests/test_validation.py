"""One rule for Plan and StepPlan: the same arguments are refused by both with the same
sentence (dtype, kv_dtype, kv_scale, integers), the FP8 names are one table shared with the
bundle code, host lengths reach C aligned, and a fresh StepPlan's workspace holds a defined
(empty) step whose status is an int."""
import numpy as np
import pytest

import mlaverify as mv
from mlaverify import bundle
from mlaverify.steps import StepPlan
from mlaverify import StepStatusError

H, DL, DR = 2, 16, 8
W = DL + DR


def _plan(kind, **kw):
    """A Plan (one problem: 2 requests) or a StepPlan (limits) on the cpu backend, f32 unless
    kw says otherwise."""
    f = dict(num_heads=H, softmax_scale=0.25, dtype="f32", page_size=1, max_pages=8,
             d_latent=DL, d_rope=DR, backend="cpu")
    f.update(kw)
    if kind == "plan":
        return mv.Plan(q_indptr=[0, 2, 3], kv_lens=[5, 1], **f)
    return StepPlan(max_batch=2, max_tokens=3, max_q_len=2, max_kv_len=8, **f)


def _inputs(kind, kv_dtype=None, dtype="f32"):
    """q, kv_cache, page_table for _plan(kind) (both take [3, H, W] q and [2, 8] pages)."""
    q = np.ones((3, H, W), np.float32 if dtype == "f32" else np.uint16)
    if kv_dtype == "fp8_e4m3":
        kv = np.full((8, 1, W), 0x38, np.uint8)  # e4m3 1.0
    else:
        kv = np.ones((8, 1, W), q.dtype)
    pt = np.tile(np.arange(8, dtype=np.int32), (2, 1))
    return q, kv, pt


def _run(kind, plan, *args, **kw):
    if kind == "step":
        plan.update([0, 2, 3], [5, 1])
    return plan.run(*args, **kw)


KINDS = ["plan", "step"]


@pytest.mark.parametrize("kind", KINDS)
def test_validation_kv_dtype_of_another_width_refused(kind):
    """kv_dtype "f32" under dtype "bf16" is not a supported mix: StepPlan used to take it and
    then read the float32 cache as BF16 bytes (the C field's 0 means the q dtype)."""
    for kv in ("f32", "float32", "f16", np.float32, "bfloat16x", True, 7, -1):
        with pytest.raises(mv.InvalidArgumentError, match="kv_dtype|dtype"):
            _plan(kind, dtype="bf16", kv_dtype=kv)


@pytest.mark.parametrize("kind", KINDS)
def test_validation_kv_dtype_zero_is_the_q_dtype(kind):
    """kv_dtype=0 is the C field's zero, the q dtype, never F32 under a 16-bit q: StepPlan took
    it as f32 and accepted a float32 cache the library then read as BF16."""
    plan = _plan(kind, dtype="bf16", kv_dtype=0)
    assert plan.kv_dtype == "bf16" if kind == "step" else plan.problem.kv_dtype == "bf16"
    q, kv, pt = _inputs(kind, dtype="bf16")
    with pytest.raises(mv.InvalidArgumentError, match="kv_cache has dtype float32"):
        _run(kind, plan, q, kv.astype(np.float32), pt)
    _run(kind, plan, q, kv, pt)  # uint16 bits: the q dtype, accepted
    for same in ("bf16", "bfloat16", 1):
        p = _plan(kind, dtype="bf16", kv_dtype=same)
        assert (p.kv_dtype if kind == "step" else p.problem.kv_dtype) == "bf16"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", [True, False, np.bool_(True), "0.25", b"0.25", [0.25],
                                 np.array([0.25], np.float64), np.array([0.25, 1], np.float32),
                                 object()])
def test_validation_kv_scale_not_a_number_refused(kind, bad):
    """A bool, a string, a list or a wrong array is refused as kv_scale on an FP8 plan, never
    converted (StepPlan used to take True as 1.0 and "0.25" as 0.25)."""
    plan = _plan(kind, kv_dtype="fp8_e4m3")
    q, kv, pt = _inputs(kind, "fp8_e4m3")
    out = np.full((3, H, DL), 7.0, np.float32)
    with pytest.raises(mv.InvalidArgumentError, match="kv_scale"):
        _run(kind, plan, q, kv, pt, out=out, lse=np.zeros((3, H), np.float32), kv_scale=bad)
    assert np.all(out == 7.0)


@pytest.mark.parametrize("kind", KINDS)
def test_validation_kv_scale_by_dtype(kind):
    """A scale on a cache that is not FP8 is refused (python/README: it would mean nothing;
    StepPlan used to ignore it); an FP8 run without one is refused; a number or a 1-element
    float32 array is taken, and both give the same answer."""
    plain = _plan(kind)
    q, kv, pt = _inputs(kind)
    for scale in (1.0, 0.5, np.array([1.0], np.float32), np.float32(1.0)):
        with pytest.raises(mv.InvalidArgumentError, match="kv_scale is the scale of an FP8"):
            _run(kind, plain, q, kv, pt, kv_scale=scale)
    ref = _run(kind, plain, q, kv, pt)[0][:3].copy()
    fp8 = _plan(kind, kv_dtype="fp8")
    q8, kv8, pt8 = _inputs(kind, "fp8_e4m3")
    with pytest.raises(mv.InvalidArgumentError, match="needs kv_scale"):
        _run(kind, fp8, q8, kv8, pt8)
    for scale in (1.0, 1, np.float32(1.0), np.array([1.0], np.float32),
                  np.array(1.0, np.float32)):
        out = _run(kind, fp8, q8, kv8, pt8, kv_scale=scale)[0][:3]
        assert np.array_equal(out, ref), scale


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("field, value", [("num_heads", 2.0), ("num_heads", True),
                                          ("page_size", "1"), ("max_pages", 8.5),
                                          ("d_rope", np.float32(8)),
                                          ("softmax_scale", "0.25"), ("softmax_scale", True),
                                          ("dtype", True), ("dtype", "fp8")])
def test_validation_shape_fields_one_rule(kind, field, value):
    """Every shape field goes through mlaverify.api.shape_fields for both classes: a float, a
    bool or a string is refused, never truncated or parsed."""
    with pytest.raises(mv.InvalidArgumentError) as e:
        _plan(kind, **{field: value})
    assert field in str(e.value) or "dtype" in str(e.value), str(e.value)


def test_validation_fp8_names_one_table():
    """Plan (Problem), StepPlan and the bundle writer agree on every FP8 name: one table
    (mlaverify.api.FP8_NAMES). They used to hold three lists that disagreed ("f8_e4m3" only
    in Problem, "float8_e4m3" only in StepPlan, neither in the bundle code)."""
    names = list(mv.api.FP8_NAMES) + [n.upper() for n in mv.api.FP8_NAMES] + [
        "torch.float8_e4m3fn", 3]
    for name in names:
        assert mv.api.is_fp8(name), name
        assert _plan("plan", kv_dtype=name).problem.kv_dtype == "fp8_e4m3", name
        assert _plan("step", kv_dtype=name).kv_dtype == "fp8_e4m3", name
        assert bundle.is_fp8(name)
    for other in ("float8_e4m3", "float8_e4m3fnuz", "fp8_e5m2", "e5m2", "int8", False, 2):
        assert not mv.api.is_fp8(other), other
        with pytest.raises(mv.InvalidArgumentError):
            _plan("plan", dtype="bf16", kv_dtype=other)
        with pytest.raises(mv.InvalidArgumentError):
            _plan("step", dtype="bf16", kv_dtype=other)


def test_validation_fp8_names_reach_the_bundle_writer(tmp_path):
    """write_bundle takes every name of the table (it knew four of them)."""
    for i, name in enumerate(list(mv.api.FP8_NAMES) + ["torch.float8_e4m3fn"]):
        path = str(tmp_path / ("b%d" % i))
        bundle.write_bundle(path, q=np.zeros((1, 1, 4), np.uint16),
                            kv_cache=np.full((1, 1, 4), 0x38, np.uint8),
                            page_table=np.zeros((1, 1), np.int32), q_indptr=[0, 1],
                            kv_lens=[1], tree_parents=[-1], softmax_scale=0.5, d_latent=2,
                            dtype="bf16", kv_dtype=name, kv_scale=0.5)
        tensors, _ = bundle.read_bundle(path)
        assert tensors["kv_cache"].dtype == np.uint8 and tensors["kv_scale"][0] == 0.5


def _misaligned_int32(values):
    """An int32 array whose data sits one byte past an int32 boundary (a view into bytes)."""
    buf = np.zeros(4 * len(values) + 1, np.uint8)
    a = buf[1:].view(np.int32)
    a[:] = values
    assert not a.flags.aligned and a.ctypes.data % 4 != 0
    return a


def test_validation_misaligned_host_lengths_are_copied():
    """int32 lengths whose address is not a multiple of 4 are copied to aligned memory before
    C reads them (they reached C misaligned: UBSan's misaligned load in the update), and the
    results are those of aligned lengths."""
    qi, kv = _misaligned_int32([0, 2, 3]), _misaligned_int32([5, 1])
    step = _plan("step")
    step.update(qi, kv)
    assert step._lengths.q_indptr % 4 == 0 and step._lengths.kv_lens % 4 == 0
    q, kvc, pt = _inputs("step")
    rng = np.random.default_rng(0)
    q = rng.uniform(-1, 1, q.shape).astype(np.float32)
    kvc = rng.uniform(-1, 1, kvc.shape).astype(np.float32)
    got = step.run(q, kvc, pt)[0].copy()
    step.update(np.array([0, 2, 3], np.int32), np.array([5, 1], np.int32))
    assert np.array_equal(step.run(q, kvc, pt)[0], got)
    p = mv.Problem(num_heads=H, softmax_scale=0.25, dtype="f32", q_indptr=qi, kv_lens=kv,
                   d_latent=DL, d_rope=DR, max_pages=8)
    assert p.q_indptr.flags.aligned and p.kv_lens.flags.aligned
    assert p._struct().q_indptr % 4 == 0 and p._struct().kv_lens % 4 == 0
    with mv.Plan(p, backend="cpu") as plan:
        assert np.array_equal(plan.run(q, kvc, pt)[0], got)
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:  # torch.from_numpy keeps the misaligned address
        tq, tk = torch.from_numpy(qi), torch.from_numpy(kv)
        assert tq.data_ptr() % 4 != 0
        step.update(tq, tk)
        assert step._lengths.q_indptr % 4 == 0 and step._lengths.kv_lens % 4 == 0
        assert np.array_equal(step.run(q, kvc, pt)[0], got)
        with pytest.raises(mv.InvalidArgumentError, match="not aligned"):
            step.run(q, kvc, torch.from_numpy(_misaligned_int32(pt.ravel())).view(2, 8))
    for helper in (mv.tree_mask_from_parents,):
        assert np.array_equal(helper(_misaligned_int32([-1, 0, 0])), helper([-1, 0, 0]))


def test_validation_fresh_step_plan_has_an_empty_step():
    """A fresh StepPlan's workspace is initialised (zeroed, then an empty step written through
    mlav_plan_update): step_status() is -1, refused_request() is -1, and a run before any
    update writes nothing. Its workspace was np.empty: the status read whatever the
    allocation held."""
    for _ in range(3):
        step = _plan("step")
        assert step.step_status() == -1 and step.refused_request() == -1
        q, kv, pt = _inputs("step")
        out = np.full((3, H, DL), 7.0, np.float32)
        lse = np.full((3, H), 7.0, np.float32)
        step.run(q, kv, pt, out=out, lse=lse)
        assert np.all(out == 7.0) and np.all(lse == 7.0)
        ws = step.workspace
        assert ws.dtype == np.uint8 and ws.ctypes.data % 256 == 0


def test_validation_step_status_index_as_an_int():
    """The refused request comes back as an int: refused_request() without raising, and
    StepStatusError.bad_request from step_status() (an InvalidArgumentError with the library's
    sentence). On the host path a refusal raises at the update, so the step's status words are
    written here as a device update records them (mlav_step_header: bad, batch)."""
    step = _plan("step")
    step.update([0, 2, 3], [5, 1])
    words = step.workspace[:8].view(np.int32)
    words[:] = [1, 2]                     # request 1 of 2 refused
    assert step.refused_request() == 1
    with pytest.raises(StepStatusError) as e:
        step.step_status()
    assert isinstance(e.value, mv.InvalidArgumentError) and e.value.bad_request == 1
    assert "request 1" in e.value.sentence and type(e.value.bad_request) is int
    words[:] = [2, 2]                     # q_indptr refused: the batch
    assert step.refused_request() == 2
    with pytest.raises(StepStatusError, match="q_indptr") as e:
        step.step_status()
    assert e.value.bad_request == 2
    step.update([0, 1], [1])              # a good step: -1 again
    assert step.refused_request() == -1 and step.step_status() == -1
    step.close()
    with pytest.raises(mv.InvalidArgumentError, match="closed"):
        step.refused_request()


def test_validation_step_status_docstring_says_8_bytes():
    """The header's mlav_plan_step_status copies 8 bytes on CUDA; the docstring said 4."""
    doc = StepPlan.step_status.__doc__
    assert "8 bytes" in doc and "4 bytes" not in doc


def test_validation_no_device_error_without_cuda_in_torch():
    """device= on a torch without CUDA raises the library's NoDeviceError, not torch's
    AssertionError ("Torch not compiled with CUDA enabled")."""
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not importable")
    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here: nothing to refuse")
    for dev in ("cuda", "cuda:0", 0):
        with pytest.raises(mv.NoDeviceError, match="needs CUDA"):
            _plan("step", device=dev)
        with pytest.raises(mv.NoDeviceError, match="needs CUDA"):
            _plan("plan", device=dev)
    with pytest.raises(mv.InvalidArgumentError, match="not a CUDA device"):
        _plan("step", device="cpu")


def test_dtype_names_are_the_librarys():
    """The binding's dtype names (api._DTYPE_ALIASES for q and out, api.FP8_NAMES for the
    cache) are exactly the library's one table (mlav_dtype_alias), which the CLI and the bundle
    tools parse with mlav_dtype_parse: a name added on one side only fails here."""
    import ctypes
    lib = mv._lib.load()
    c_names = {}
    d = ctypes.c_int()
    i = 0
    while True:
        name = lib.mlav_dtype_alias(i, ctypes.byref(d))
        if name is None:
            break
        c_names[name.decode()] = d.value
        i += 1
    py_names = {k: mv.api.DTYPES[v] for k, v in mv.api._DTYPE_ALIASES.items()}
    py_names.update({k: mv.api.DTYPES["fp8_e4m3"] for k in mv.api.FP8_NAMES})
    assert c_names == py_names
    for name, value in c_names.items():
        assert lib.mlav_dtype_parse(("torch." + name.upper()).encode(), ctypes.byref(d)) == 0
        assert d.value == value
