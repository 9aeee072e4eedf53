"""Plans through the binding on host memory: the `cpu` backend against the `reference` fp64
oracle backend and against an independent numpy fp64 oracle, on fresh random inputs (the seed
is printed; MLAV_TEST_SEED reproduces a failure)."""
import threading

import numpy as np
import pytest

import mlaverify as mv
from mlav_testutil import compare, make_case, oracle, plan_for, round_to_dtype

# (name, H, Dl, Dr, dtype, page_size, requests (q_len, prefix, tree), causal)
CASES = [
    ("h=8,q=9,prefix=300,page=1,bf16,deep", 8, 512, 64, "bf16", 1,
     [(9, 300, "random")], False),
    ("h=16,q=33+1+5,page=16,f32,batch", 16, 512, 64, "f32", 16,
     [(33, 70, "random"), (1, 0, "chain"), (5, 129, "bushy")], False),
    ("h=8,q=17,prefix=0,page=64,f16,bushy", 8, 512, 64, "f16", 64,
     [(17, 0, "bushy"), (3, 700, "chain")], False),
    ("h=4,q=40,prefix=1100,page=1,bf16,causal", 4, 512, 64, "bf16", 1,
     [(40, 1100, "chain"), (7, 33, "chain")], True),
    ("h=3,q=64,page=7,f32,small-dims", 3, 40, 8, "f32", 7,
     [(64, 50, "random"), (2, 5, "chain")], False),
]


@pytest.mark.parametrize("case_spec", CASES, ids=[c[0] for c in CASES])
def test_plan_cpu_matches_reference_and_oracle(case_spec, seed):
    name, H, Dl, Dr, dtype, ps, reqs, causal = case_spec
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=H, Dl=Dl, Dr=Dr, dtype=dtype, page_size=ps, reqs=reqs,
                     causal=causal)
    results = {}
    for backend in ("cpu", "reference"):
        with plan_for(case, backend) as plan:
            assert plan.backend == backend
            results[backend] = plan.run(case["q"], case["kv_cache"], case["page_table"],
                                        case["tree_mask"])
    ref_out, ref_lse = results["reference"]
    out, lse = results["cpu"]
    assert out.dtype == case["q"].dtype and out.shape == (case["T"], H, Dl)
    assert lse.dtype == np.float32 and lse.shape == (case["T"], H)
    compare(case, out, lse, ref_out, ref_lse, name + " cpu vs reference", seed)
    o64, l64 = oracle(case)
    # the reference backend is the fp64 oracle rounded to the dtype: the same numbers as numpy's
    compare(case, ref_out, ref_lse, round_to_dtype(o64, dtype), l64,
            name + " reference vs numpy oracle", seed, tol_scale=0.5)
    compare(case, out, lse, round_to_dtype(o64, dtype), l64, name + " cpu vs numpy oracle", seed)



def test_plan_reuse_and_one_shot_verify(seed):
    """A plan runs again on new values of the same shape; verify() infers the shapes."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=4, Dl=64, Dr=16, dtype="f32", page_size=4,
                     reqs=[(6, 20, "random"), (3, 0, "bushy")])
    with plan_for(case, "cpu") as plan:
        first = plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
        q2 = (case["q"] * 0.5).astype(np.float32)
        second = plan.run(q2, case["kv_cache"], case["page_table"], case["tree_mask"])
    one = mv.verify(q2, case["kv_cache"], case["page_table"], case["tree_mask"],
                    q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                    softmax_scale=case["scale"], d_latent=64, backend="cpu")
    assert not np.array_equal(first[0], second[0])
    assert np.array_equal(second[0], one[0]) and np.array_equal(second[1], one[1])


def test_plan_row_without_visible_key_is_zero_and_minus_inf():
    """A mask row with no bit set, no prefix: out = 0, lse = -inf (and no NaN)."""
    case = make_case(np.random.default_rng(1), H=2, Dl=16, Dr=4, dtype="f32", page_size=2,
                     reqs=[(3, 0, "chain")])
    mask = case["tree_mask"].copy()
    mask[1] = 0
    for backend in ("cpu", "reference"):
        with plan_for(case, backend) as plan:
            out, lse = plan.run(case["q"], case["kv_cache"], case["page_table"], mask)
        assert np.all(out[1] == 0) and np.all(lse[1] == -np.inf), backend
        assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse[[0, 2]])), backend


def test_plan_context_auto_and_note():
    ctx = mv.Context("auto")
    assert ctx.backend in ("cpu", "cuda")
    assert ctx.note
    if not mv.backend_compiled("cuda"):
        assert ctx.backend == "cpu" and "without CUDA" in ctx.note


def test_plan_cuda_absent_raises_no_device():
    if mv.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(mv.NoDeviceError) as e:
        mv.Context("cuda")
    assert e.value.status_name == "MLAV_ERR_NO_DEVICE" and e.value.sentence


def test_plan_shared_by_threads(seed):
    """One plan run from several Python threads at once (the library runs without the GIL;
    the binding's cached workspace is taken in turn) gives one answer in every thread, that of
    the main thread within tolerance. Not bitwise: OpenMP's thread count is per calling thread
    (`import torch` sets the main thread's to the physical cores), and a plan made with one
    thread lets OpenBLAS thread its sgemms by the caller's count, which rounds differently."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=4, Dl=64, Dr=16, dtype="bf16", page_size=1,
                     reqs=[(9, 200, "random"), (4, 30, "chain")])
    with plan_for(case, "cpu") as plan:
        want = plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
        got, errors = [], []

        def work():
            try:
                for _ in range(5):
                    got.append(plan.run(case["q"], case["kv_cache"], case["page_table"],
                                        case["tree_mask"]))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert len(got) == 20
    for o, l in got:
        assert np.array_equal(o, got[0][0]) and np.array_equal(l, got[0][1])
    compare(case, got[0][0], got[0][1], *want, what="threads vs main thread", seed=seed)


def test_plan_env_backend_override(monkeypatch):
    monkeypatch.setenv("MLAV_BACKEND", "reference")
    assert mv.Context("auto").backend == "reference"
    monkeypatch.setenv("MLAV_BACKEND", "gpu-please")
    with pytest.raises(mv.InvalidArgumentError, match="MLAV_BACKEND='gpu-please'"):
        mv.Context("auto")


def test_plan_readme_numpy_example_runs():
    """The numpy example of python/README.md runs as written."""
    import os
    import re
    readme = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "README.md")
    code = re.search(r"## numpy.*?```python\n(.*?)```", open(readme).read(), re.S).group(1)
    env = {}
    exec(compile(code, readme, "exec"), env)  # noqa: S102 - our own documentation
    assert env["out"].shape == (13, 8, 512) and env["lse"].shape == (13, 8)
    assert env["path"][0] == 0 and np.all(np.isfinite(env["lse"]))


def test_plan_and_step_plan_one_run_body(seed):
    """Plan and StepPlan run through one body (PlanCore._run): a Plan given out and lse takes
    the fast path (numpy and CPU torch) and writes the bits of its checked path (out and lse
    allocated); lse=False leaves lse uncomputed on both kinds of plan; a wrong out still gets
    the checked path's sentence."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=4, Dl=64, Dr=16, dtype="f32", page_size=4,
                     reqs=[(6, 20, "random"), (3, 0, "bushy")])
    args = (case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
    with plan_for(case, "cpu") as plan:
        want_o, want_l = plan.run(*args)
        out, lse = np.full_like(want_o, 7.0), np.full_like(want_l, 7.0)
        got_o, got_l = plan.run(*args, out=out, lse=lse)
        assert got_o is out and got_l is lse
        assert np.array_equal(out, want_o) and np.array_equal(lse, want_l)
        o, l = plan.run(*args, lse=False)
        assert l is None and np.array_equal(o, want_o)
        with pytest.raises(mv.InvalidArgumentError, match="out has shape"):
            plan.run(*args, out=out[:1], lse=lse)
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None:
            t_args = [torch.from_numpy(a.view(np.int32) if a.dtype == np.uint32 else a)
                      for a in args]
            t_out, t_lse = torch.full_like(torch.from_numpy(want_o), 7.0), \
                torch.full_like(torch.from_numpy(want_l), 7.0)
            plan.run(*t_args, out=t_out, lse=t_lse)
            assert np.array_equal(t_out.numpy(), want_o) and np.array_equal(t_lse.numpy(), want_l)
    T = int(case["q_indptr"][-1])
    sp = mv.StepPlan(4, case["scale"], "f32", 4, case["page_table"].shape[1], 2, T,
                     int(np.diff(case["q_indptr"]).max()), int(case["kv_lens"].max()),
                     d_latent=64, d_rope=16, backend="cpu")
    sp.update(case["q_indptr"], case["kv_lens"])
    mask = np.zeros((T, sp.mask_words), np.uint32)
    mask[:, :case["tree_mask"].shape[1]] = case["tree_mask"]
    o, l = sp.run(case["q"], case["kv_cache"], case["page_table"], mask, lse=False)
    assert l is None and np.array_equal(o, want_o)
    sp.close()
