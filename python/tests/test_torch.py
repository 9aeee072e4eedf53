"""torch tensors through the binding: CPU tensors wherever torch is installed, and on a GPU
host CUDA tensors on the current and on a non-default stream, CUDA-graph capture of
Plan.run and of the SGLang adapter, offload of numpy inputs, and a capture from CUDA tensors.
Every test skips (with its reason) when torch, a GPU, or a CUDA build of the library is absent.

On the GPU host (after building with CUDA into build/):

    MLAVERIFY_LIBRARY=$PWD/build/libmlaverify.so MLAVERIFY_CLI=$PWD/build/mlaverify \
        python3 -m pytest -q -rs python/tests/test_torch.py
    # without pytest, the same tests:
    MLAVERIFY_LIBRARY=... python3 python/tests/test_torch.py

Skips are pytest's, or unittest.SkipTest without pytest, so the file also runs standalone.
"""
import os
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ""))  # python/ (the package)
sys.path.insert(0, HERE)

try:
    import torch
except ImportError:  # pragma: no cover - the GPU host has it
    torch = None

import mlaverify as mv  # noqa: E402
from mlaverify.sglang import SGLangVerifier  # noqa: E402
from mlav_testutil import compare, fresh_seed, make_case, plan_for  # noqa: E402


try:  # pytest's own skip when it runs us (reported at the test), unittest's standalone
    from pytest import skip as _pytest_skip
    SkipTest = _pytest_skip.Exception
except ImportError:  # pragma: no cover
    SkipTest = unittest.SkipTest


def _need_torch():
    if torch is None:
        raise SkipTest("torch is not installed")


def _need_cuda():
    _need_torch()
    if not torch.cuda.is_available():
        raise SkipTest("torch sees no CUDA device")
    if not mv.backend_compiled("cuda"):
        raise SkipTest("libmlaverify was built without CUDA")
    if mv.cuda_device_count() == 0:
        raise SkipTest("libmlaverify sees no CUDA device of cc >= 8.0")


def _t(a, device="cpu"):
    """numpy storage -> torch (uint16 BF16 bits -> torch.bfloat16, uint32 masks -> int32)."""
    if a is None:
        return None
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    if a.dtype == np.uint32:
        return torch.from_numpy(a.view(np.int32).copy()).to(device)
    return torch.from_numpy(a.copy()).to(device)


def _np(x):
    """torch output -> numpy storage (bfloat16 -> uint16 bits)."""
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def _case(seed, **kw):
    spec = dict(H=16, Dl=512, Dr=64, dtype="bf16", page_size=1,
                reqs=[(9, 1500, "random"), (33, 300, "bushy"), (1, 0, "chain")])
    spec.update(kw)
    return make_case(np.random.default_rng(seed), **spec)


def _reference(case):
    with plan_for(case, "reference") as plan:
        return plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])


# ---- CPU tensors -----------------------------------------------------------------------------

def test_torch_cpu_tensors_match_numpy():
    _need_torch()
    seed = fresh_seed("test_torch_cpu_tensors_match_numpy")
    for dtype in ("bf16", "f16", "f32"):
        case = _case(seed, H=4, Dl=64, Dr=16, dtype=dtype, page_size=4,
                     reqs=[(9, 100, "random"), (3, 0, "chain")])
        with plan_for(case, "cpu") as plan:
            want = plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
            out, lse = plan.run(_t(case["q"]), _t(case["kv_cache"]), _t(case["page_table"]),
                                _t(case["tree_mask"]))
        assert isinstance(out, torch.Tensor) and out.dtype == _t(case["q"]).dtype
        assert lse.dtype == torch.float32 and out.device.type == "cpu"
        assert np.array_equal(_np(out), want[0]) and np.array_equal(_np(lse), want[1]), dtype


def test_torch_cpu_bad_tensors():
    _need_torch()
    case = _case(1, H=2, Dl=16, Dr=8, dtype="bf16", page_size=2, reqs=[(3, 4, "bushy")])
    q, kv, pt, mask = (_t(case[k]) for k in ("q", "kv_cache", "page_table", "tree_mask"))
    with plan_for(case, "cpu") as plan:
        for args, match in [
            ((q.transpose(0, 1).contiguous().transpose(0, 1), kv, pt, mask), "not contiguous"),
            ((q, kv, pt.long(), mask), "page_table has dtype int64"),
            ((q.half(), kv, pt, mask), "plan's dtype bf16 needs torch.bfloat16"),
        ]:
            try:
                plan.run(*args)
            except mv.InvalidArgumentError as e:
                assert match in str(e), str(e)
            else:
                raise AssertionError("no error for " + match)


def test_torch_cpu_sglang_adapter_modes():
    """The adapter's torch code path (gathers and packing in torch) on CPU tensors, every mask
    mode, against a direct run."""
    _need_torch()
    seed = fresh_seed("test_torch_cpu_sglang_adapter_modes")
    rng = np.random.default_rng(seed)
    from mlav_testutil import sglang_inputs as _sglang_inputs
    for q_lens, prefixes in (([8, 8], [50, 0]), ([3, 40], [9, 100])):
        case = make_case(rng, H=4, Dl=64, Dr=16, dtype="bf16", page_size=1,
                         reqs=[(n, p, "random") for n, p in zip(q_lens, prefixes)])
        with plan_for(case, "reference") as plan:
            want = plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
        s = _sglang_inputs(case, rng)
        v = SGLangVerifier(4, case["scale"], d_latent=64, d_rope=16, backend="reference")
        v.plan(prefixes, q_lens)
        masks = [s["full"], s["qlen"], s["dense"], case["tree_mask"]]
        if s["bits"] is not None:
            masks += [s["bits"].astype(np.uint8), s["bits"].astype(np.int16),
                      s["bits"].view(np.int32)]
        q, pool = _t(case["q"]), _t(case["kv_cache"])
        for m in masks:
            for g in (dict(kv_indptr=_t(s["kv_indptr"]), kv_indices=_t(s["kv_indices"]),
                           out_cache_loc=_t(s["out_cache_loc"])),
                      dict(kv_indptr=_t(s["fi_kv_indptr"]), kv_indices=_t(s["fi_kv_indices"]))):
                out, lse = v.run(q, pool, custom_mask=_t(m), **g)
                what = "mask %s %s (seed %d)" % (m.dtype, list(m.shape), seed)
                assert np.array_equal(_np(out), want[0]), what
                assert np.array_equal(_np(lse), want[1]), what
        mask = v.tree_mask(_t(s["full"]))
        assert mask.dtype == torch.int32
        assert np.array_equal(mask.numpy().view(np.uint32), case["tree_mask"])
        v.close()


def test_torch_cpu_helpers_and_capture():
    """merge_states and capture_bundle take CPU torch tensors (bf16 bits kept exactly)."""
    _need_torch()
    outs = [torch.randn(3, 4, 8) for _ in range(2)]
    lses = [torch.randn(3, 4) for _ in range(2)]
    out, lse = mv.merge_states(outs, lses)
    want, want_lse = mv.merge_states([o.numpy() for o in outs], [x.numpy() for x in lses])
    assert isinstance(out, torch.Tensor) and np.array_equal(out.numpy(), want)
    case = _case(4, H=2, Dl=16, Dr=8, page_size=4, reqs=[(3, 6, "bushy")], spare_pages=20)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "c.safetensors")
        info = mv.capture_bundle(p, q=_t(case["q"]), kv_cache=_t(case["kv_cache"]),
                                 page_table=_t(case["page_table"]),
                                 q_indptr=torch.tensor(case["q_indptr"]),
                                 kv_lens=torch.tensor(case["kv_lens"]),
                                 softmax_scale=case["scale"], tree_mask=_t(case["tree_mask"]),
                                 d_latent=16)
        got, meta = mv.read_bundle(p)
    assert info["pages"] == 3 and got["kv_cache"].shape == (3, 4, 24)
    assert np.array_equal(got["q"], case["q"])          # the bf16 bits, untouched
    rows = case["page_table"][0, :3]
    assert np.array_equal(got["kv_cache"], case["kv_cache"][rows])
    assert np.array_equal(got["tree_parents"], case["parents"])


# ---- CUDA tensors ----------------------------------------------------------------------------

def test_torch_cuda_tensors_match_reference():
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_tensors_match_reference")
    for dtype, ps in (("bf16", 1), ("f16", 64), ("f32", 16)):
        case = _case(seed, H=64 if dtype == "bf16" else 16, dtype=dtype, page_size=ps)
        ref = _reference(case)
        for backend in ("cuda", "cuda-naive"):
            with plan_for(case, backend) as plan:
                out, lse = plan.run(*(_t(case[k], "cuda") for k in
                                      ("q", "kv_cache", "page_table", "tree_mask")))
                torch.cuda.synchronize()
            assert out.is_cuda and lse.is_cuda
            compare(case, _np(out), _np(lse), *ref, what="%s %s page=%d" % (backend, dtype, ps),
                    seed=seed)


def test_torch_cuda_non_default_stream():
    """Runs go on the current torch stream, or the one given; both are the default run's."""
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_non_default_stream")
    case = _case(seed)
    args = [_t(case[k], "cuda") for k in ("q", "kv_cache", "page_table", "tree_mask")]
    with plan_for(case, "cuda", device=0) as plan:
        want_out, want_lse = plan.run(*args)
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):               # current stream: s
            o1, l1 = plan.run(*args)
        o2, l2 = plan.run(*args, stream=s)       # explicit torch stream
        o3, l3 = plan.run(*args, stream=s.cuda_stream)  # raw cudaStream_t
        s.synchronize()
        torch.cuda.synchronize()
    for o, l in ((o1, l1), (o2, l2), (o3, l3)):
        assert torch.equal(o, want_out) and torch.equal(l, want_lse)
    compare(case, _np(want_out), _np(want_lse), *_reference(case), what="stream", seed=seed)


def test_torch_cuda_graph_capture():
    """Plan.run captured in a CUDA graph (workspace allocated at Plan(device=...)), replayed on
    new values written into the same tensors."""
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_graph_capture")
    case = _case(seed)
    static = [_t(case[k], "cuda") for k in ("q", "kv_cache", "page_table", "tree_mask")]
    with plan_for(case, "cuda", device="cuda:0") as plan:
        out = torch.empty((case["T"], case["H"], case["Dl"]), dtype=torch.bfloat16,
                          device="cuda")
        lse = torch.empty((case["T"], case["H"]), dtype=torch.float32, device="cuda")
        plan.run(*static, out=out, lse=lse)  # warm-up (torch's advice: kernels loaded)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            plan.run(*static, out=out, lse=lse)
        for r in range(3):
            c = _case(seed + 1 + r)                # same shape, new values and page shuffle
            for dst, k in zip(static, ("q", "kv_cache", "page_table", "tree_mask")):
                dst.copy_(_t(c[k], "cuda"))
            out.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            eager = plan.run(*static)
            torch.cuda.synchronize()
            assert torch.equal(out, eager[0]) and torch.equal(lse, eager[1]), "replay %d" % r
            compare(c, _np(out), _np(lse), *_reference(c), what="graph replay %d" % r,
                    seed=seed)
        del g


def test_torch_cuda_sglang_adapter_graph():
    """The SGLang adapter on CUDA tensors (pool [pool, 1, 576], int64 indices, FULL_MASK),
    eagerly and captured in a graph, equals a direct run."""
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_sglang_adapter_graph")
    rng = np.random.default_rng(seed)
    prefixes = [700, 0, 129]
    case = make_case(rng, H=16, Dl=512, Dr=64, dtype="bf16", page_size=1,
                     reqs=[(8, p, "random") for p in prefixes])
    from mlav_testutil import sglang_inputs as _sglang_inputs
    s = _sglang_inputs(case, rng)
    dev = torch.device("cuda", 0)
    pool = _t(case["kv_cache"], dev)
    q = _t(case["q"], dev)
    kv_indptr, kv_indices = _t(s["kv_indptr"], dev), _t(s["kv_indices"], dev)
    loc, full = _t(s["out_cache_loc"], dev), _t(s["full"], dev)
    v = SGLangVerifier(16, case["scale"], dtype="bf16", backend="cuda")
    v.plan(prefixes, 8, device=dev)
    with plan_for(case, "cuda") as plan:
        want = plan.run(q, pool, _t(case["page_table"], dev), _t(case["tree_mask"], dev))
    eager = v.run(q, pool, kv_indptr=kv_indptr, kv_indices=kv_indices, out_cache_loc=loc,
                  custom_mask=full)
    torch.cuda.synchronize()
    assert torch.equal(eager[0], want[0]) and torch.equal(eager[1], want[1])
    out = torch.empty_like(want[0])
    lse = torch.empty_like(want[1])
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        v.run(q, pool, kv_indptr=kv_indptr, kv_indices=kv_indices, out_cache_loc=loc,
              custom_mask=full, out=out, lse=lse)
    q.copy_(_t(make_case(np.random.default_rng(seed + 9), H=16, dtype="bf16", page_size=1,
                         reqs=[(8, p, "random") for p in prefixes])["q"], dev))
    g.replay()
    torch.cuda.synchronize()
    again = v.run(q, pool, kv_indptr=kv_indptr, kv_indices=kv_indices, out_cache_loc=loc,
                  custom_mask=full)
    torch.cuda.synchronize()
    assert torch.equal(out, again[0]) and torch.equal(lse, again[1])
    del g
    v.close()


def test_torch_cuda_residency_errors():
    _need_cuda()
    case = _case(3, H=4, dtype="f32", page_size=4, reqs=[(3, 10, "bushy")])
    args = [_t(case[k], "cuda") for k in ("q", "kv_cache", "page_table", "tree_mask")]
    with plan_for(case, "cpu") as plan:
        try:
            plan.run(*args)
        except mv.UnsupportedError as e:
            assert "device memory" in e.sentence, e.sentence
        else:
            raise AssertionError("a cpu plan ran CUDA tensors")
    with plan_for(case, "cuda") as plan:
        try:
            plan.run(args[0], args[1], args[2].cpu(), args[3])
        except mv.InvalidArgumentError as e:
            assert "different places" in str(e), str(e)
        else:
            raise AssertionError("mixed host and CUDA tensors ran")


def test_torch_cuda_numpy_offload():
    """numpy inputs on a CUDA plan: mapped to the device and back (offload mode)."""
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_numpy_offload")
    case = _case(seed)
    with plan_for(case, "cuda") as plan:
        out, lse = plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
    assert isinstance(out, np.ndarray)
    compare(case, out, lse, *_reference(case), what="offload", seed=seed)


def test_torch_cuda_capture_bundle_check():
    """capture_bundle from CUDA bf16 tensors, completed and checked on the cuda backend."""
    _need_cuda()
    try:
        cli = mv.bundle.find_cli()
    except FileNotFoundError as e:
        raise SkipTest(str(e))
    seed = fresh_seed("test_torch_cuda_capture_bundle_check")
    case = _case(seed, spare_pages=3000)
    with tempfile.TemporaryDirectory() as d:
        inputs, out = os.path.join(d, "in.safetensors"), os.path.join(d, "b.safetensors")
        info = mv.capture_bundle(inputs, q=_t(case["q"], "cuda"),
                                 kv_cache=_t(case["kv_cache"], "cuda"),
                                 page_table=_t(case["page_table"], "cuda"),
                                 q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                                 softmax_scale=case["scale"],
                                 tree_mask=_t(case["tree_mask"], "cuda"))
        assert info["pages"] == int(sum(case["kv_lens"]))
        mv.complete_bundle(inputs, out, cli=cli, args=["--readout-tries", "4"])
        ok, report = mv.check_bundle(out, backend="cuda", cli=cli)
        assert ok, report


def test_torch_cuda_second_device():
    _need_cuda()
    if torch.cuda.device_count() < 2 or mv.cuda_device_count() < 2:
        raise SkipTest("one CUDA device")
    seed = fresh_seed("test_torch_cuda_second_device")
    case = _case(seed)
    args = [_t(case[k], "cuda:1") for k in ("q", "kv_cache", "page_table", "tree_mask")]
    with plan_for(case, "cuda", device=1) as plan:
        out, lse = plan.run(*args)
        torch.cuda.synchronize(1)
        assert out.device.index == 1
        try:
            plan.run(*[a.to("cuda:0") for a in args])
        except mv.InvalidArgumentError as e:
            assert "plan was made on cuda:1" in str(e)
        else:
            raise AssertionError("ran cuda:0 tensors on a cuda:1 plan")
    compare(case, _np(out), _np(lse), *_reference(case), what="cuda:1", seed=seed)


# ---- the torch ops (torch_ops): the out variant and opcheck -----------------------------------

def _op_case(seed, device="cpu", full=True):
    """A StepPlan on `device` (cpu: the cpu backend) with its last update applied and the op's
    arguments: every max_tokens row belongs to the step when `full` (so each output element is
    written, as opcheck's comparisons of two runs need)."""
    from mlaverify import torch_ops
    if not torch_ops.REGISTERED:
        raise SkipTest("mlaverify ops not registered: " + torch_ops.HOW)
    rng = np.random.default_rng(seed)
    # the cpu backend takes any dims; CUDA's plans for limits run the flash kernel's
    H, P = 2, 8
    Dl, Dr = (32, 16) if device == "cpu" else (512, 64)
    plan = mv.StepPlan(num_heads=H, softmax_scale=0.2, dtype="f32", page_size=4, max_pages=P,
                       max_batch=3, max_tokens=8, max_q_len=4, max_kv_len=32, d_latent=Dl,
                       d_rope=Dr, backend="cpu" if device == "cpu" else "cuda",
                       device=None if device == "cpu" else device)
    qi = [0, 3, 4, 8] if full else [0, 2, 3, 5]
    plan.update(torch.tensor(qi, dtype=torch.int32, device=device) if device != "cpu" else qi,
                torch.tensor([9, 1, 30], dtype=torch.int32, device=device)
                if device != "cpu" else [9, 1, 30])
    mask = np.zeros((8, 1), np.uint32)
    par = [-1, 0, 0, -1, -1, 0, 1, 1] if full else [-1, 0, -1, -1, 0]
    mask[:qi[-1]] = mv.tree_mask_from_parents(par, qi)
    args = dict(q=torch.from_numpy(rng.uniform(-1, 1, (8, H, Dl + Dr)).astype(np.float32)),
                kv=torch.from_numpy(rng.uniform(-1, 1, (40, 4, Dl + Dr)).astype(np.float32)),
                pt=torch.from_numpy(rng.permutation(40)[:3 * P].reshape(3, P).astype(np.int32)),
                mask=torch.from_numpy(mask.view(np.int32)))
    return plan, {k: v.to(device) for k, v in args.items()}, torch_ops


def test_torch_op_out_variant_cpu():
    """verify_step_out writes the out and lse it is given (the step's rows, nothing else) and
    allocates nothing; the same numbers as verify_step's fresh outputs."""
    _need_torch()
    seed = fresh_seed("test_torch_op_out_variant_cpu")
    plan, a, torch_ops = _op_case(seed, full=False)
    q, kv, pt, mask = a["q"], a["kv"], a["pt"], a["mask"]
    want_o, want_l = torch.ops.mlaverify.verify_step(q, kv, pt, mask, plan.id, plan.d_latent)
    out = torch.full((8, 2, 32), 7.0)
    lse = torch.full((8, 2), 7.0)
    empty = torch.empty

    def no_alloc(*args, **kw):
        raise AssertionError("the out variant allocated")
    torch.empty = no_alloc
    try:
        r = torch.ops.mlaverify.verify_step_out(q, kv, pt, mask, plan.id, out, lse)
        o, l = torch_ops.verify_step(plan, q, kv, pt, mask, out=out, lse=lse)
    finally:
        torch.empty = empty
    assert r is None and o is out and l is lse
    assert torch.equal(out[:5], want_o[:5]) and torch.equal(lse[:5], want_l[:5])
    assert torch.all(out[5:] == 7.0) and torch.all(lse[5:] == 7.0), "rows past the step"
    try:
        torch_ops.verify_step(plan, q, kv, pt, mask, out=out)
    except mv.InvalidArgumentError as e:
        assert "out and lse given together" in str(e)
    else:
        raise AssertionError("out without lse accepted")
    for bad in (True, "0.5"):
        try:
            torch_ops.verify_step(plan, q, kv, pt, mask, kv_scale=bad)
        except mv.InvalidArgumentError as e:
            assert "kv_scale" in str(e)
        else:
            raise AssertionError("kv_scale=%r accepted" % (bad,))
    meta = [x.to("meta") for x in (q, kv, pt, mask)]
    assert torch.ops.mlaverify.verify_step_out(*meta, plan.id, out.to("meta"),
                                               lse.to("meta")) is None
    # a shared page table through the op (rows given; checked even where the library
    # predates them)
    rows = torch.tensor([2, 0, 1], dtype=torch.int32)
    table = pt[[1, 2, 0]].contiguous()
    try:
        torch_ops.verify_step(plan, q, kv, table, mask, page_table_rows=rows[:2])
    except mv.InvalidArgumentError as e:
        assert "page_table_rows has shape [2], expected [3]" in str(e), str(e)
    else:
        raise AssertionError("2 rows for max_batch 3 accepted")


def test_torch_op_opcheck():
    """torch.library.opcheck of both ops (schema, fake tensors, AOT dispatch with dynamic
    shapes) on CPU tensors of a CPU StepPlan, and on CUDA tensors where a GPU is there. The
    autograd-registration check is left out: the ops are inference only and opcheck refuses
    to run it without an input that requires grad."""
    _need_torch()
    opcheck = getattr(torch.library, "opcheck", None)
    if opcheck is None:
        raise SkipTest("torch %s has no torch.library.opcheck (2.4 and later)"
                       % torch.__version__)
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    seed = fresh_seed("test_torch_op_opcheck")
    devices = ["cpu"]
    if torch.cuda.is_available() and mv.backend_compiled("cuda") and mv.cuda_device_count():
        devices.append("cuda")
    for device in devices:
        plan, a, _ = _op_case(seed, device)
        args = (a["q"], a["kv"], a["pt"], a["mask"], plan.id)
        opcheck(torch.ops.mlaverify.verify_step.default, args + (plan.d_latent,),
                test_utils=utils)
        out = torch.zeros((8, 2, plan.d_latent), device=device)
        lse = torch.zeros((8, 2), device=device)
        opcheck(torch.ops.mlaverify.verify_step_out.default, args + (out, lse),
                test_utils=utils)
        rows = torch.tensor([2, 0, 1], dtype=torch.int32, device=device)
        opcheck(torch.ops.mlaverify.verify_step.default, args + (plan.d_latent,),
                {"page_table_rows": rows}, test_utils=("test_schema", "test_faketensor"))


def test_torch_cuda_op_out_variant_graph():
    """The out variant captured in a CUDA graph: the capture allocates nothing (torch's
    allocator grows by what the capture of an empty graph costs it, no more: on the H200 host
    torch 2.11 took 1,024 bytes in a capture of this op alone, two 512-byte blocks, which the
    test then read as the op's) and each replay writes the given out and lse as an eager
    verify_step does."""
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_op_out_variant_graph")
    plan, a, torch_ops = _op_case(seed, "cuda:0", full=False)
    q, kv, pt, mask = a["q"], a["kv"], a["pt"], a["mask"]
    out = torch.zeros((8, 2, plan.d_latent), device="cuda:0")
    lse = torch.zeros((8, 2), device="cuda:0")
    torch_ops.verify_step(plan, q, kv, pt, mask, out=out, lse=lse)  # warm-up
    torch.cuda.synchronize()
    # torch's own cost of a capture (its generator's graph state: allocated for the first live
    # graph, or per graph): an empty graph kept alive, then an empty capture as the yardstick
    keep = torch.cuda.CUDAGraph()
    with torch.cuda.graph(keep):
        pass
    before = torch.cuda.memory_allocated()
    g0 = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g0):
        pass
    own = torch.cuda.memory_allocated() - before
    before = torch.cuda.memory_allocated()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.ops.mlaverify.verify_step_out(q, kv, pt, mask, plan.id, out, lse)
    grew = torch.cuda.memory_allocated() - before
    assert grew == own, "the captured out variant allocated %d bytes over an empty capture's %d" \
        % (grew, own)
    for r in range(3):
        q.copy_(torch.randn_like(q))
        out.fill_(float("nan"))
        g.replay()
        want_o, want_l = torch.ops.mlaverify.verify_step(q, kv, pt, mask, plan.id,
                                                         plan.d_latent)
        torch.cuda.synchronize()
        assert torch.equal(out[:5], want_o[:5]) and torch.equal(lse[:5], want_l[:5]), r
    del g, g0, keep


def test_torch_cuda_page_table_rows():
    """A shared page table on the device (rows permuted, more rows than requests) with
    page_table_rows as a CUDA tensor: the reference backend's numbers on the gathered table;
    a device index outside the table makes that request's rows NaN (loud, as the header
    says), the other requests' unchanged."""
    _need_cuda()
    seed = fresh_seed("test_torch_cuda_page_table_rows")
    rng = np.random.default_rng(seed)
    case = _case(seed)
    pt = case["page_table"]
    R = pt.shape[0] + 9
    table = rng.integers(0, case["kv_cache"].shape[0], (R, pt.shape[1])).astype(np.int32)
    rows = rng.permutation(R)[:pt.shape[0]].astype(np.int32)
    table[rows] = pt
    args = [_t(case[k], "cuda") for k in ("q", "kv_cache")]
    with plan_for(case, "cuda", device="cuda:0") as plan:
        out, lse = plan.run(*args, _t(table, "cuda"), _t(case["tree_mask"], "cuda"),
                            page_table_rows=_t(rows, "cuda"))
        torch.cuda.synchronize()
        compare(case, _np(out), _np(lse), *_reference(case), what="cuda rows", seed=seed)
        bad = rows.copy()
        bad[1] = R + 5
        o2, l2 = plan.run(*args, _t(table, "cuda"), _t(case["tree_mask"], "cuda"),
                          page_table_rows=_t(bad, "cuda"))
        torch.cuda.synchronize()
        qi = case["q_indptr"]
        lo, hi = int(qi[1]), int(qi[2])
        assert torch.isnan(o2[lo:hi].float()).all(), "an index past the table gave numbers"
        assert torch.equal(o2[:lo], out[:lo]) and torch.equal(o2[hi:], out[hi:])


def test_torch_cuda_device_past_the_last_is_no_device():
    """device= naming a CUDA device torch does not have is the library's NoDeviceError (not
    torch's invalid-ordinal RuntimeError)."""
    _need_cuda()
    past = "cuda:%d" % torch.cuda.device_count()
    case = _case(1, H=2, Dl=16, Dr=8, dtype="f32", reqs=[(3, 4, "bushy")])
    for make in (lambda: plan_for(case, "cuda", device=past),
                 lambda: mv.StepPlan(num_heads=2, softmax_scale=0.5, dtype="f32", page_size=1,
                                     max_pages=8, max_batch=2, max_tokens=8, max_q_len=4,
                                     max_kv_len=8, d_latent=16, d_rope=8, backend="cuda",
                                     device=past)):
        try:
            make()
        except mv.NoDeviceError as e:
            assert "torch sees" in str(e), str(e)
        else:
            raise AssertionError("a plan on %s" % past)


if __name__ == "__main__":
    # a runner for hosts without pytest: every test_ function, skips reported
    mv._lib.load()
    print("libmlaverify %s from %s; torch %s" % (mv.version(), mv._lib.path(),
                                                  torch.__version__ if torch else "absent"))
    failed = 0
    for name, fn in sorted(globals().items()):
        if not (name.startswith("test_") and callable(fn)):
            continue
        try:
            fn()
            print("PASS", name)
        except SkipTest as e:
            print("SKIP", name, "-", e)
        except Exception:  # noqa: BLE001 - reported and counted
            import traceback
            traceback.print_exc()
            print("FAIL", name)
            failed += 1
    sys.exit(1 if failed else 0)
