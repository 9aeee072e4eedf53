"""FP8 (E4M3) KV caches from Python: the e4m3 decode and rounding, kv_dtype / kv_scale through
Problem, Plan.run and verify, runs against the numpy fp64 oracle, bundles with an F8_E4M3 cache
(write, read, capture, check), and the committed FP8 golden bundles' expectations recomputed in
numpy from e4m3 x kv_scale. Every backend computes FP8 caches: a run that breaks fails here,
it never skips (only torch without float8_e4m3fn, before 2.1, skips the torch cache test)."""
import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import mlaverify as mv
from mlaverify import bundle
from mlaverify.api import kv_scale_arg
from mlaverify.bundle import bf16_to_f32, e4m3_bits, e4m3_to_f32
from mlav_testutil import (FP8_SCALE, compare, make_case, oracle, plan_for,
                           round_to_dtype)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_FP8 = sorted(glob.glob(os.path.join(ROOT, "golden", "fp8_*.safetensors")))

try:
    import torch
except ImportError:  # pragma: no cover - Debian's python3-torch is there in CI
    torch = None
HAS_TORCH_FP8 = torch is not None and hasattr(torch, "float8_e4m3fn")
NO_TORCH_FP8 = "torch %s has no float8_e4m3fn (2.1 and later do)" % (
    torch.__version__ if torch is not None else "(absent)")


# ---- e4m3 ----------------------------------------------------------------------------------

def test_fp8_e4m3_values():
    v = e4m3_to_f32(np.arange(256, dtype=np.uint8))
    assert v.dtype == np.float32
    assert v[0x38] == 1.0 and v[0x40] == 2.0 and v[0xB8] == -1.0
    assert v[0x7E] == 448.0 and v[0xFE] == -448.0           # the largest finite
    assert v[0x01] == 2.0 ** -9 and v[0x08] == 2.0 ** -6    # smallest subnormal, normal
    assert v[0x00] == 0.0 and np.signbit(v[0x80])
    assert np.isnan(v[0x7F]) and np.isnan(v[0xFF])          # no infinities
    assert np.isnan(v).sum() == 2
    finite = v[:0x7F]
    assert np.all(np.diff(finite) > 0)                       # bytes 0..0x7e increase


def test_fp8_e4m3_rounding():
    b = np.arange(256, dtype=np.uint8)
    b = b[~np.isnan(e4m3_to_f32(b))]
    assert np.array_equal(e4m3_bits(e4m3_to_f32(b)), b)      # every value is its own byte
    # halfway between neighbours: ties go to the even byte (even mantissa)
    lo, hi = e4m3_to_f32(np.uint8(0x38)), e4m3_to_f32(np.uint8(0x39))   # 1, 1.125
    assert e4m3_bits((lo + hi) / 2) == 0x38
    lo, hi = e4m3_to_f32(np.uint8(0x39)), e4m3_to_f32(np.uint8(0x3A))   # 1.125, 1.25
    assert e4m3_bits((lo + hi) / 2) == 0x3A
    assert e4m3_bits(np.float32(1.0625001)) == 0x39          # past halfway: up
    assert e4m3_bits(2.0 ** -10) == 0x00                     # half the smallest: to even 0
    assert e4m3_bits(3 * 2.0 ** -10) == 0x02                 # 1.5 x 2^-9: to even 2 x 2^-9
    assert e4m3_bits(-3 * 2.0 ** -10) == 0x82
    assert e4m3_bits(500.0) == 0x7E and e4m3_bits(-np.inf) == 0xFE    # saturating
    assert e4m3_bits(np.nan) == 0x7F
    assert e4m3_bits(-0.0) == 0x80
    x = np.random.default_rng(1).uniform(-300, 300, 10000).astype(np.float32)
    got = e4m3_to_f32(e4m3_bits(x)).astype(np.float64)
    # nearest: no e4m3 value is closer than the one chosen
    finite = np.unique(e4m3_to_f32(b).astype(np.float64))
    best = np.abs(finite[None, :] - x[:, None].astype(np.float64)).min(axis=1)
    assert np.array_equal(np.abs(got - x), best)


# ---- the binding's arguments ----------------------------------------------------------------

def _fp8_problem(**kw):
    f = dict(num_heads=2, d_latent=16, d_rope=8, softmax_scale=0.25, dtype="bf16",
             page_size=4, q_indptr=[0, 3], kv_lens=[9], kv_dtype="fp8")
    f.update(kw)
    return mv.Problem(**f)


def test_fp8_problem_kv_dtype():
    p = _fp8_problem()
    assert p.kv_dtype == "fp8_e4m3" and p._struct().kv_dtype == 3 and p._struct().dtype == 1
    assert "kv_dtype=fp8_e4m3" in repr(p)
    for name in ("fp8_e4m3", "FP8", "e4m3", "float8_e4m3fn", 3):
        assert _fp8_problem(kv_dtype=name).kv_dtype == "fp8_e4m3"
    same = _fp8_problem(kv_dtype=None)
    assert same.kv_dtype == "bf16" and same._struct().kv_dtype == 1
    assert _fp8_problem(kv_dtype="bfloat16").kv_dtype == "bf16"
    assert _fp8_problem(kv_dtype=0).kv_dtype == "bf16"      # as in mlav_problem: the q dtype
    with pytest.raises(mv.InvalidArgumentError, match="the cache has the q dtype or is fp8"):
        _fp8_problem(kv_dtype="f16")
    with pytest.raises(mv.InvalidArgumentError, match="only the KV cache may be FP8"):
        _fp8_problem(dtype="fp8_e4m3")
    with pytest.raises(mv.InvalidArgumentError, match="only the KV cache may be FP8"):
        mv.dtype_name(3)
    assert mv.DTYPES["fp8_e4m3"] == 3


def test_fp8_kv_scale_arg():
    assert kv_scale_arg(0.5, None) == (0.5, None)
    assert kv_scale_arg(np.float32(0.25), 0) == (0.25, None)   # a number: read now, anywhere
    a = np.array([0.5], dtype=np.float32)
    assert kv_scale_arg(a, None) == (0.0, a.ctypes.data)
    s0 = np.array(0.5, dtype=np.float32)                       # 0-dim, as engines keep it
    assert kv_scale_arg(s0, None) == (0.0, s0.ctypes.data)
    assert kv_scale_arg(None, None, "bf16") == (0.0, None)
    with pytest.raises(mv.InvalidArgumentError, match="needs kv_scale"):
        kv_scale_arg(None, None)
    with pytest.raises(mv.InvalidArgumentError, match="this plan's cache is bf16"):
        kv_scale_arg(0.5, None, "bf16")
    with pytest.raises(mv.InvalidArgumentError, match="one float32 value"):
        kv_scale_arg(np.array([0.5], dtype=np.float64), None)
    with pytest.raises(mv.InvalidArgumentError, match="one float32 value"):
        kv_scale_arg(np.array([0.5, 1.0], dtype=np.float32), None)
    with pytest.raises(mv.InvalidArgumentError, match="but the tensors are in cuda:0"):
        kv_scale_arg(a, 0)
    with pytest.raises(mv.InvalidArgumentError, match="not a bool"):
        kv_scale_arg(True, None)
    if torch is not None:
        t = torch.tensor([0.5], dtype=torch.float32)
        assert kv_scale_arg(t, None) == (0.0, t.data_ptr())
        with pytest.raises(mv.InvalidArgumentError, match="but the tensors are in cuda:0"):
            kv_scale_arg(t, 0)


def test_fp8_run_argument_errors():
    """What the binding refuses before the library runs (no FP8 backend needed)."""
    case = make_case(np.random.default_rng(0), H=2, Dl=16, Dr=8, dtype="bf16", page_size=4,
                     reqs=[(3, 6, "bushy")], kv_dtype="fp8")
    args = (case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
    with plan_for(case, "cpu") as plan:
        with pytest.raises(mv.InvalidArgumentError, match="needs kv_scale"):
            plan.run(*args)
        with pytest.raises(mv.InvalidArgumentError, match="kv_dtype fp8_e4m3 needs "
                                                          "torch.float8_e4m3fn or uint8"):
            plan.run(case["q"], case["kv_cache"].astype(np.uint16), case["page_table"],
                     case["tree_mask"], kv_scale=case["kv_scale"])
    bf = make_case(np.random.default_rng(0), H=2, Dl=16, Dr=8, dtype="bf16", page_size=4,
                   reqs=[(3, 6, "bushy")])
    with plan_for(bf, "cpu") as plan:
        with pytest.raises(mv.InvalidArgumentError, match="kv_scale is the scale of an FP8"):
            plan.run(bf["q"], bf["kv_cache"], bf["page_table"], bf["tree_mask"], kv_scale=1.0)
        with pytest.raises(mv.InvalidArgumentError, match="kv_dtype bf16 needs"):
            plan.run(bf["q"], case["kv_cache"], bf["page_table"], bf["tree_mask"])
    with pytest.raises(mv.InvalidArgumentError, match="kv_cache is uint8: pass kv_dtype"):
        mv.verify(*args, q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                  softmax_scale=case["scale"], d_latent=16, dtype="bf16", backend="cpu",
                  kv_scale=case["kv_scale"])


# ---- runs (need a backend that computes FP8) ------------------------------------------------

@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("dtype,page_size", [("bf16", 1), ("f32", 16), ("f16", 64)])
def test_fp8_run_matches_numpy_oracle(seed, backend, dtype, page_size):
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=8, Dl=512, Dr=64, dtype=dtype, page_size=page_size,
                     reqs=[(9, 300, "random"), (1, 0, "chain"), (5, 40, "bushy")],
                     kv_dtype="fp8_e4m3")
    assert case["kv_cache"].dtype == np.uint8
    o64, ref_lse = oracle(case)
    ref_out = round_to_dtype(o64, dtype)
    args = (case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
    with plan_for(case, backend) as plan:
        out, lse = plan.run(*args, kv_scale=case["kv_scale"])
        compare(case, out, lse, ref_out, ref_lse, "%s fp8 %s" % (backend, dtype), seed)
        # the scale as a host array the run reads (kv_scale_ptr): the same result
        out2, lse2 = plan.run(*args, kv_scale=np.array([case["kv_scale"]], np.float32))
        assert np.array_equal(out, out2) and np.array_equal(lse, lse2)
        if torch is not None:
            out3, _ = plan.run(*args, kv_scale=torch.tensor([case["kv_scale"]]))
            assert np.array_equal(out, out3)
        # a different scale is a different cache: the run must read it
        out4, _ = plan.run(*args, kv_scale=2 * case["kv_scale"])
        assert not np.array_equal(out, out4)
    one, _ = mv.verify(*args, q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                       softmax_scale=case["scale"], d_latent=512, dtype=dtype,
                       kv_dtype="fp8", kv_scale=case["kv_scale"], backend=backend)
    assert np.array_equal(one, out)


@pytest.mark.skipif(not HAS_TORCH_FP8, reason=NO_TORCH_FP8)
def test_fp8_torch_float8_cache(seed):
    case = make_case(np.random.default_rng(seed), H=4, Dl=64, Dr=16, dtype="f32", page_size=2,
                     reqs=[(5, 30, "bushy")], kv_dtype="fp8")
    kv = torch.from_numpy(case["kv_cache"]).view(torch.float8_e4m3fn)
    q = torch.from_numpy(case["q"])
    out, lse = mv.verify(q, kv, torch.from_numpy(case["page_table"]),
                         torch.from_numpy(case["tree_mask"].view(np.int32)),
                         q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                         softmax_scale=case["scale"], d_latent=64, kv_scale=case["kv_scale"],
                         backend="cpu")
    ref_out, ref_lse = oracle(case)  # f32: compare takes the fp64 values as they are
    compare(case, out.numpy(), lse.numpy(), ref_out, ref_lse, "torch float8", seed)


# ---- bundles --------------------------------------------------------------------------------

def _fp8_bundle_case(seed, dtype="bf16"):
    return make_case(np.random.default_rng(seed), H=4, Dl=64, Dr=16, dtype=dtype, page_size=4,
                     reqs=[(5, 21, "bushy"), (3, 0, "chain")], spare_pages=3, kv_dtype="fp8")


def test_fp8_bundle_write_read(tmp_path, seed):
    case = _fp8_bundle_case(seed)
    a, b = str(tmp_path / "bytes.safetensors"), str(tmp_path / "floats.safetensors")
    common = dict(q=case["q"], page_table=case["page_table"], q_indptr=case["q_indptr"],
                  kv_lens=case["kv_lens"], tree_parents=case["parents"],
                  softmax_scale=case["scale"], d_latent=64, dtype="bf16", kv_dtype="fp8_e4m3",
                  kv_scale=case["kv_scale"])
    bundle.write_bundle(a, kv_cache=case["kv_cache"], **common)
    got, meta = mv.read_bundle(a)
    assert got["kv_cache"].dtype == np.uint8
    assert np.array_equal(got["kv_cache"], case["kv_cache"])
    assert got["kv_scale"].dtype == np.float32 and got["kv_scale"].tolist() == [case["kv_scale"]]
    assert np.array_equal(got["q"], case["q"])
    raw = open(a, "rb").read()
    assert b'"kv_cache":{"dtype":"F8_E4M3"' in raw and b'"kv_scale":{"dtype":"F32"' in raw
    # float values are quantized as e4m3(v / kv_scale): the same bytes as the case's
    values = e4m3_to_f32(case["kv_cache"]).astype(np.float64) * case["kv_scale"]
    bundle.write_bundle(b, kv_cache=values, **common)
    assert open(b, "rb").read() == raw
    with pytest.raises(ValueError, match="needs its kv_scale"):
        bundle.write_bundle(a, kv_cache=case["kv_cache"], **dict(common, kv_scale=None))
    with pytest.raises(ValueError, match="kv_scale goes with an fp8_e4m3 cache"):
        bundle.write_bundle(a, kv_cache=values.astype(np.float32),
                            **dict(common, kv_dtype=None))
    for bad in (0.0, -1.0, float("nan"), float("inf"), 1e-50, [0.5, 0.5]):
        with pytest.raises(ValueError, match="kv_scale"):
            bundle.write_bundle(a, kv_cache=case["kv_cache"], **dict(common, kv_scale=bad))
    with pytest.raises(ValueError, match="the cache has q's dtype or is fp8_e4m3"):
        bundle.write_bundle(a, kv_cache=case["kv_cache"], **dict(common, kv_dtype="f16"))
    # golden/write_bundle.py --kv-dtype fp8 with kv_scale in the .npz: the same file again
    npz, c = str(tmp_path / "cap.npz"), str(tmp_path / "cli.safetensors")
    np.savez(npz, q=case["q"], kv_cache=case["kv_cache"], page_table=case["page_table"],
             q_indptr=case["q_indptr"], kv_lens=case["kv_lens"], tree_parents=case["parents"],
             softmax_scale=np.float32(case["scale"]), kv_scale=np.float32(case["kv_scale"]))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "golden", "write_bundle.py"), "--npz",
                        npz, "--d-latent", "64", "--dtype", "bf16", "--kv-dtype", "fp8", c],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got, meta = mv.read_bundle(c)
    assert np.array_equal(got["kv_cache"], case["kv_cache"])
    assert got["kv_scale"].tolist() == [case["kv_scale"]]


def test_fp8_bundle_capture(tmp_path, seed):
    case = _fp8_bundle_case(seed)
    p = str(tmp_path / "cap.safetensors")
    kw = dict(q=case["q"], kv_cache=case["kv_cache"], page_table=case["page_table"],
              q_indptr=case["q_indptr"], kv_lens=case["kv_lens"], softmax_scale=case["scale"],
              tree_mask=case["tree_mask"], d_latent=64, dtype="bf16")
    with pytest.raises(ValueError, match="kv_cache is uint8: say kv_dtype"):
        mv.capture_bundle(p, **kw)
    with pytest.raises(ValueError, match="needs its kv_scale"):
        mv.capture_bundle(p, kv_dtype="fp8_e4m3", **kw)
    scale = np.array([case["kv_scale"]], np.float32)  # a scale tensor, as engines keep it
    info = mv.capture_bundle(p, kv_dtype="fp8_e4m3", kv_scale=scale, **kw)
    got, _ = mv.read_bundle(p)
    used = int(sum(-(-int(k) // 4) for k in case["kv_lens"]))
    assert info["pages"] == used == got["kv_cache"].shape[0]
    assert got["kv_scale"].tolist() == [case["kv_scale"]]
    # the compacted pool keeps exactly the bytes each request's rows had
    for b in range(2):
        for j in range(int(case["kv_lens"][b])):
            old = case["kv_cache"][case["page_table"][b, j // 4], j % 4]
            new = got["kv_cache"][got["page_table"][b, j // 4], j % 4]
            assert np.array_equal(old, new)
    if HAS_TORCH_FP8:
        t = str(tmp_path / "torch.safetensors")
        kv = torch.from_numpy(case["kv_cache"]).view(torch.float8_e4m3fn)
        mv.capture_bundle(t, **dict(kw, kv_cache=kv), kv_scale=torch.tensor(case["kv_scale"]))
        assert np.array_equal(mv.read_bundle(t)[0]["kv_cache"], got["kv_cache"])


def test_fp8_bundle_complete_and_check(tmp_path, cli, seed):
    """capture -> gen --expect-from (the fp64 oracle on e4m3 x kv_scale) -> check on cpu and
    reference; the expectations agree with the numpy oracle."""
    for dtype in ("bf16", "f32"):
        case = _fp8_bundle_case(seed, dtype)
        inputs, out = str(tmp_path / "in.safetensors"), str(tmp_path / "b.safetensors")
        mv.capture_bundle(inputs, q=case["q"], kv_cache=case["kv_cache"],
                          page_table=case["page_table"], q_indptr=case["q_indptr"],
                          kv_lens=case["kv_lens"], softmax_scale=case["scale"],
                          tree_mask=case["tree_mask"], d_latent=64, dtype=dtype,
                          kv_dtype="fp8", kv_scale=case["kv_scale"], compact=False)
        mv.complete_bundle(inputs, out, cli=cli, args=["--readout-tries", "4"])
        for backend in ("cpu", "reference"):
            ok, text = mv.check_bundle(out, backend=backend, cli=cli)
            assert ok, "%s (seed %d)" % (text, seed)
            assert "kv=fp8_e4m3*" in text
        done, _ = mv.read_bundle(out)
        ref_out, ref_lse = oracle(case)
        err = np.linalg.norm(ref_out - done["expect_out"]) / np.linalg.norm(ref_out)
        assert err <= 1e-6, (err, seed)


# ---- the committed FP8 golden bundles -------------------------------------------------------

def _bundle_case(path):
    """A make_case-style dict of a bundle's inputs, for mlav_testutil.oracle."""
    t, meta = mv.read_bundle(path)
    H, Dl = int(meta["num_heads"]), int(meta["d_latent"])
    q = bf16_to_f32(t["q"]) if t["q"].dtype == np.uint16 else t["q"]
    scale = float(t["kv_scale"].reshape(-1)[0])
    case = dict(T=int(t["q"].shape[0]), H=H, Dl=Dl, page_size=int(t["kv_cache"].shape[1]),
                q_indptr=t["q_indptr"], kv_lens=t["kv_lens"], page_table=t["page_table"],
                scale=float(t["softmax_scale"][0]), q_val=q.astype(np.float64),
                kv_val=e4m3_to_f32(t["kv_cache"]).astype(np.float64) * scale,
                tree_mask=mv.tree_mask_from_parents(t["tree_parents"], t["q_indptr"]))
    return case, t, scale


def test_fp8_golden_bundles_present():
    names = [os.path.basename(p) for p in GOLDEN_FP8]
    assert len(names) >= 3, names


@pytest.mark.parametrize("path", GOLDEN_FP8, ids=os.path.basename)
def test_fp8_golden_expectations_are_e4m3_times_scale(path):
    """The committed expectations are the attention over e4m3(byte) x kv_scale, recomputed here
    in numpy fp64 (independent of the library's oracle): equal up to their F32 rounding; the
    bytes a request does not use are the NaN poison 0x7f."""
    case, t, scale = _bundle_case(path)
    assert t["kv_cache"].dtype == np.uint8 and scale > 0
    out, lse = oracle(case)
    exp_out, exp_lse = t["expect_out"].astype(np.float64), t["expect_lse"].astype(np.float64)
    err = np.abs(out - exp_out).max() / np.abs(out).max()
    assert err <= 1e-6, err
    assert np.abs(lse - exp_lse).max() <= 1e-5
    # each stored float is the fp64 value rounded: at most half an F32 ulp away
    assert np.all(np.abs(out - exp_out) <= np.spacing(np.abs(exp_out).astype(np.float32)) * 0.51
                  + 1e-300)
    kv, ps = t["kv_cache"], int(t["kv_cache"].shape[1])
    used = np.zeros(kv.shape[:2], dtype=bool)
    for b in range(len(case["kv_lens"])):
        j = np.arange(int(case["kv_lens"][b]))
        used[case["page_table"][b, j // ps], j % ps] = True
    assert np.all(kv[~used] == 0x7F)
    assert not np.any(np.isnan(e4m3_to_f32(kv[used])))
    # the generator's default scale puts the largest byte's value near 224 (FORMAT.md)
    if abs(scale - FP8_SCALE) == 0:
        assert 200 <= np.abs(e4m3_to_f32(kv[used])).max() <= 224
