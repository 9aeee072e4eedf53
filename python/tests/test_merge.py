"""mlaverify.merge: merge_states and merge_state on numpy arrays (every dtype, N in 1, 2, 3, 7,
64, against an fp64 merge with the C tests' bound), CPU torch tensors, and CUDA tensors (the
device kernel on the current stream, in a CUDA graph, and the torch ops with opcheck; skipped
without torch, a GPU or a CUDA build of the library).

On the GPU host (after building with CUDA into build/):

    MLAVERIFY_LIBRARY=$PWD/build/libmlaverify.so python3 -m pytest -q -rs python/tests/test_merge.py
"""
import numpy as np
import pytest

import mlaverify as mv
from mlav_testutil import fresh_seed

try:
    import torch
except ImportError:  # pragma: no cover - the GPU host has it
    torch = None

COUNTS = (1, 2, 3, 7, 64)
DTYPES = ("f32", "f16", "bf16")
_U = {"f32": 0.0, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}  # the dtype's unit roundoff


def to_bf16_bits(x):
    """float32 -> BF16 bits (uint16), round to nearest even, NaN kept NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r).astype(np.uint16)


def from_bits(a, dtype):
    """An array of `dtype` storage as float64 (BF16: uint16 bits)."""
    if dtype == "bf16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def store(x, dtype):
    """float32 values in `dtype` storage (numpy: BF16 as uint16 bits)."""
    if dtype == "bf16":
        return to_bf16_bits(x)
    return x.astype(np.float16 if dtype == "f16" else np.float32)


def random_states(rng, dtype, n, shape, dim, special=True):
    """Stacked states [n, *shape, dim] and lses [n, *shape]: o uniform [-1, 1), lse uniform
    [-4, 4), one (state, row) in five empty (lse -inf, o NaN); with `special` the first row all
    empty, the second with a NaN lse and the third with +inf (both NaN rows)."""
    lse = rng.uniform(-4, 4, (n,) + shape).astype(np.float32)
    o = rng.uniform(-1, 1, (n,) + shape + (dim,)).astype(np.float32)
    empty = rng.random((n,) + shape) < 0.2
    lse[empty] = -np.inf
    o[empty] = np.nan
    flat_l, flat_o = lse.reshape(n, -1), o.reshape(n, -1, dim)
    rows = flat_l.shape[1]
    if special and rows > 2:
        flat_l[:, 0], flat_o[:, 0] = -np.inf, np.nan
        flat_l[-1, 1] = np.nan
        flat_l[0, 2] = np.inf
    return store(o, dtype), lse


def check_merge(outs, lses, out, lse, dtype):
    """out and lse against the fp64 merge, with test_merge_states.c's rules and bound."""
    n = outs.shape[0]
    o = from_bits(outs, dtype).reshape(n, -1, outs.shape[-1])
    ls = lses.astype(np.float64).reshape(n, -1)
    got = from_bits(out, dtype).reshape(o.shape[1:])
    gl = lse.reshape(-1).astype(np.float64)
    nan_row = np.any(np.isnan(ls) | (ls == np.inf), axis=0)
    with np.errstate(invalid="ignore"):
        m = np.max(np.where(np.isnan(ls), -np.inf, ls), axis=0)
        w = np.where(m == -np.inf, 0.0, np.exp(ls - m))
    w[:, nan_row] = 0.0
    s = w.sum(0)
    wn = np.divide(w, s, out=np.zeros_like(w), where=s > 0)
    contrib = np.where(wn[..., None] != 0, wn[..., None] * np.nan_to_num(o, nan=0.0), 0.0)
    nan_el = np.any((wn[..., None] != 0) & np.isnan(o), axis=0)
    ref = contrib.sum(0)
    mag = np.abs(contrib).sum(0)
    ref_lse = np.where(s > 0, m + np.log(np.where(s > 0, s, 1.0)), -np.inf)
    ref_lse[nan_row] = np.nan
    want_nan = nan_row[:, None] | nan_el
    assert np.array_equal(np.isnan(got), want_nan), "NaN elements differ from the rules"
    assert np.array_equal(np.isnan(gl), nan_row), "NaN rows differ from the rules"
    empty = (s == 0) & ~nan_row
    assert np.all(got[empty] == 0) and np.all(gl[empty] == -np.inf), "an all-empty row"
    live = ~want_nan & ~empty[:, None]
    eps = 2.0 ** -24
    tiny = 2.0 ** -25 if dtype == "f16" else 0.0
    bound = (2 * n + 32) * eps * mag + _U[dtype] * np.abs(ref) + tiny
    err = np.abs(got - ref)
    assert np.all(err[live] <= bound[live]), "out off by %g (bound %g)" % (
        np.max(err[live] - bound[live]), 0)
    lv = ~nan_row & ~empty
    assert np.all(np.abs(gl[lv] - ref_lse[lv]) <= (n + 8) * eps * (np.abs(ref_lse[lv]) + 1))
    if n == 1:  # one state: itself, bit for bit
        live_rows = ~nan_row & ~empty
        assert np.array_equal(out.reshape(-1, outs.shape[-1])[live_rows],
                              outs.reshape(-1, outs.shape[-1])[live_rows])
        assert np.array_equal(lse.reshape(-1)[live_rows], lses.reshape(-1)[live_rows])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", COUNTS)
def test_merge_states_numpy(dtype, n):
    seed = fresh_seed("test_merge_states_numpy[%s-%d]" % (dtype, n))
    rng = np.random.default_rng(seed)
    outs, lses = random_states(rng, dtype, n, (5, 3), int(rng.choice([1, 7, 64, 130])))
    kw = {"dtype": "bf16"} if dtype == "bf16" else {}
    out, lse = mv.merge_states(outs, lses, **kw)
    assert out.shape == outs.shape[1:] and out.dtype == outs.dtype and lse.dtype == np.float32
    check_merge(outs, lses, out, lse, dtype)
    # a sequence of states is the same merge; out and lse may be the first state's
    o2, l2 = mv.merge_states(list(outs), list(lses), **kw)
    assert np.array_equal(o2.view(np.uint8), out.view(np.uint8))
    first, first_lse = outs[0], lses[0]
    o3, l3 = mv.merge_states(outs, lses, out=first, lse=first_lse, **kw)
    assert o3 is first and l3 is first_lse and np.array_equal(outs[0].view(np.uint8), out.view(np.uint8))
    assert np.array_equal(lses[0].view(np.uint8), lse.view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_state_in_place_numpy(dtype):
    seed = fresh_seed("test_merge_state_in_place_numpy[%s]" % dtype)
    rng = np.random.default_rng(seed)
    outs, lses = random_states(rng, dtype, 2, (4, 8), 65)
    kw = {"dtype": "bf16"} if dtype == "bf16" else {}
    want, want_lse = mv.merge_states(outs, lses, **kw)
    a, al = outs[0].copy(), lses[0].copy()
    r = mv.merge_state(a, al, outs[1], lses[1], **kw)
    assert r[0] is a and r[1] is al
    assert np.array_equal(a.view(np.uint8), want.view(np.uint8))
    assert np.array_equal(al.view(np.uint8), want_lse.view(np.uint8))
    check_merge(outs, lses, a, al, dtype)


def test_merge_bad_input():
    f = np.zeros((2, 3, 4), np.float32)
    ls = np.zeros((2, 3), np.float32)
    with pytest.raises(mv.InvalidArgumentError, match="float32"):
        mv.merge_states(f.astype(np.float64), ls)
    with pytest.raises(mv.InvalidArgumentError, match="raw BF16"):
        mv.merge_states(f.view(np.uint16), ls)
    with pytest.raises(mv.InvalidArgumentError, match="lses"):
        mv.merge_states(f, ls.astype(np.float64))
    with pytest.raises(mv.InvalidArgumentError, match="lses"):
        mv.merge_states(f, ls[:, :2].copy())
    with pytest.raises(mv.InvalidArgumentError, match="do not match"):
        mv.merge_states([f[0], f[0, :2]], [ls[0], ls[0, :2]])
    with pytest.raises(mv.InvalidArgumentError, match="out is"):
        mv.merge_states(f, ls, out=np.zeros((3, 5), np.float32))
    with pytest.raises(mv.InvalidArgumentError, match="overlaps"):
        mv.merge_states(f, ls, out=f[1])  # only the first state may be the output
    with pytest.raises(mv.InvalidArgumentError, match="overlaps"):
        mv.merge_state(f[0], ls[0], f[0], ls[1])
    with pytest.raises(mv.InvalidArgumentError, match="other_out"):
        mv.merge_state(f[0], ls[0], np.zeros((3, 5), np.float32), ls[1])
    with pytest.raises(mv.InvalidArgumentError, match="num_states"):
        mv.merge_states(np.zeros((0, 3, 4), np.float32), np.zeros((0, 3), np.float32))


# ---- torch ------------------------------------------------------------------------------------

def _need_torch():
    if torch is None:
        pytest.skip("torch is not installed")


def _need_cuda():
    _need_torch()
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if not mv.backend_compiled("cuda"):
        pytest.skip("libmlaverify was built without CUDA")
    if mv.cuda_device_count() == 0:
        pytest.skip("libmlaverify sees no CUDA device of cc >= 8.0")


_TORCH = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _t(a, dtype, device="cpu"):
    if dtype == "bf16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(a.copy()).to(device)


def _np(x):
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_torch_cpu(dtype):
    """CPU tensors: the host merge, torch in and out, equal to numpy's bit for bit."""
    _need_torch()
    rng = np.random.default_rng(fresh_seed("test_merge_torch_cpu[%s]" % dtype))
    outs, lses = random_states(rng, dtype, 3, (4, 2), 16)
    kw = {"dtype": "bf16"} if dtype == "bf16" else {}
    want, want_lse = mv.merge_states(outs, lses, **kw)
    out, lse = mv.merge_states(_t(outs, dtype), _t(lses, "f32"))
    assert isinstance(out, torch.Tensor) and str(out.dtype) == "torch." + _TORCH[dtype]
    assert np.array_equal(_np(out).view(np.uint8), want.view(np.uint8))
    assert np.array_equal(_np(lse).view(np.uint8), want_lse.view(np.uint8))


def test_merge_torch_ops_cpu():
    """The ops on CPU tensors: merge_states as mv.merge_states, merge_state_in_place as the
    stacked merge of the pair, bit for bit; meta tensors get the shapes without a run."""
    _need_torch()
    from mlaverify import torch_ops
    if not torch_ops.REGISTERED:
        pytest.skip(torch_ops.HOW)
    rng = np.random.default_rng(fresh_seed("test_merge_torch_ops_cpu"))
    outs, lses = random_states(rng, "bf16", 3, (4, 2), 16)
    to, tl = _t(outs, "bf16"), _t(lses, "f32")
    out, lse = torch.ops.mlaverify.merge_states(to, tl)
    want, want_lse = mv.merge_states(outs, lses, dtype="bf16")
    assert np.array_equal(_np(out), want) and np.array_equal(_np(lse).view(np.uint8),
                                                             want_lse.view(np.uint8))
    a, al = to[0].clone(), tl[0].clone()
    assert torch.ops.mlaverify.merge_state_in_place(a, al, to[1], tl[1]) is None
    pair, pair_lse = mv.merge_states(outs[:2], lses[:2], dtype="bf16")
    assert np.array_equal(_np(a), pair) and np.array_equal(_np(al).view(np.uint8),
                                                           pair_lse.view(np.uint8))
    m, ml = torch.ops.mlaverify.merge_states(to.to("meta"), tl.to("meta"))
    assert m.shape == out.shape and m.dtype == out.dtype and ml.shape == lse.shape


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", COUNTS)
def test_merge_torch_cuda(dtype, n):
    """CUDA tensors: the device kernel on a non-default current stream, within the fp64 bound;
    the in-place pair likewise."""
    _need_cuda()
    rng = np.random.default_rng(fresh_seed("test_merge_torch_cuda[%s-%d]" % (dtype, n)))
    outs, lses = random_states(rng, dtype, n, (6, 16), 512)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        to, tl = _t(outs, dtype, "cuda"), _t(lses, "f32", "cuda")
        out, lse = mv.merge_states(to, tl)
        if n == 2:
            mv.merge_state(to[0], tl[0], to[1], tl[1])
    s.synchronize()
    check_merge(outs, lses, _np(out), _np(lse), dtype)
    if n == 2:
        assert np.array_equal(_np(to[0]).view(np.uint8), _np(out).view(np.uint8))
        assert np.array_equal(_np(tl[0]).view(np.uint8), _np(lse).view(np.uint8))


def test_merge_torch_cuda_graph():
    """The ops captured in a CUDA graph and replayed on new inputs copied into the captured
    tensors: each replay equals eager calls on those inputs, bit for bit."""
    _need_cuda()
    from mlaverify import torch_ops
    if not torch_ops.REGISTERED:
        pytest.skip(torch_ops.HOW)
    rng = np.random.default_rng(fresh_seed("test_merge_torch_cuda_graph"))
    outs, lses = random_states(rng, "bf16", 4, (8, 16), 512)
    to, tl = _t(outs, "bf16", "cuda"), _t(lses, "f32", "cuda")
    a, al = to[0].clone(), tl[0].clone()
    torch.ops.mlaverify.merge_states(to, tl)  # warm-up
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        gout, glse = torch.ops.mlaverify.merge_states(to, tl)
        torch.ops.mlaverify.merge_state_in_place(a, al, to[1], tl[1])
    for rep in range(3):
        outs, lses = random_states(rng, "bf16", 4, (8, 16), 512, special=rep != 1)
        to.copy_(_t(outs, "bf16", "cuda"))
        tl.copy_(_t(lses, "f32", "cuda"))
        a.copy_(to[0])
        al.copy_(tl[0])
        g.replay()
        torch.cuda.synchronize()
        want, want_lse = torch.ops.mlaverify.merge_states(to, tl)
        pa, pal = to[0].clone(), tl[0].clone()
        torch.ops.mlaverify.merge_state_in_place(pa, pal, to[1], tl[1])
        torch.cuda.synchronize()
        assert torch.equal(gout.view(torch.int16), want.view(torch.int16)), rep
        assert torch.equal(glse.view(torch.int32), want_lse.view(torch.int32)), rep
        assert torch.equal(a.view(torch.int16), pa.view(torch.int16)), rep
        assert torch.equal(al.view(torch.int32), pal.view(torch.int32)), rep
        check_merge(outs, lses, _np(gout), _np(glse), "bf16")


def test_merge_torch_opcheck():
    """torch.library.opcheck of both merge ops (schema, fake tensors, AOT dispatch with dynamic
    shapes) on CPU tensors, and on CUDA tensors where a GPU is there."""
    _need_torch()
    from mlaverify import torch_ops
    if not torch_ops.REGISTERED:
        pytest.skip(torch_ops.HOW)
    opcheck = getattr(torch.library, "opcheck", None)
    if opcheck is None:
        pytest.skip("torch %s has no torch.library.opcheck (2.4 and later)" % torch.__version__)
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    rng = np.random.default_rng(fresh_seed("test_merge_torch_opcheck"))
    devices = ["cpu"]
    if torch.cuda.is_available() and mv.backend_compiled("cuda") and mv.cuda_device_count():
        devices.append("cuda")
    for device in devices:
        outs, lses = random_states(rng, "f32", 3, (4, 2), 32, special=False)
        to, tl = _t(outs, "f32", device), _t(lses, "f32", device)
        opcheck(torch.ops.mlaverify.merge_states.default, (to, tl), test_utils=utils)
        a, al = to[0].clone(), tl[0].clone()
        opcheck(torch.ops.mlaverify.merge_state_in_place.default, (a, al, to[1], tl[1]),
                test_utils=utils)
