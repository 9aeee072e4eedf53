"""The SGLang adapter: token pool + kv_indptr/kv_indices (+ out_cache_loc) + each of SGLang's
tree-mask modes give exactly what a direct Plan.run gives on the equivalent page table."""
import numpy as np
import pytest

import mlaverify as mv
from mlaverify.sglang import SGLangVerifier
from mlav_testutil import make_case, plan_for, sglang_inputs as _sglang_inputs


@pytest.mark.parametrize("backend", ["reference", "cpu"])
@pytest.mark.parametrize("q_lens,prefixes", [([8, 8, 8], [100, 0, 37]),
                                             ([4, 33, 1], [20, 300, 9])])
def test_sglang_adapter_matches_direct_plan(q_lens, prefixes, backend, seed):
    rng = np.random.default_rng(seed)
    reqs = [(n, p, "random") for n, p in zip(q_lens, prefixes)]
    case = make_case(rng, H=4, Dl=64, Dr=16, dtype="bf16", page_size=1, reqs=reqs)
    with plan_for(case, backend) as plan:
        want_out, want_lse = plan.run(case["q"], case["kv_cache"], case["page_table"],
                                      case["tree_mask"])
    s = _sglang_inputs(case, rng)
    v = SGLangVerifier(case["H"], case["scale"], d_latent=64, d_rope=16, dtype="bf16",
                       backend=backend)
    uniform = len(set(q_lens)) == 1
    v.plan(prefixes, q_lens[0] if uniform else q_lens)
    gathers = {
        "triton (prefix indices + out_cache_loc)": dict(
            kv_indptr=s["kv_indptr"], kv_indices=s["kv_indices"],
            out_cache_loc=s["out_cache_loc"]),
        "flashinfer (indices incl. draft)": dict(kv_indptr=s["fi_kv_indptr"],
                                                 kv_indices=s["fi_kv_indices"]),
        "page_table": dict(page_table=case["page_table"][:, :max(case["kv_lens"])].copy()),
    }
    masks = {"FULL_MASK": s["full"], "QLEN_ONLY": s["qlen"], "dense [T, max_q]": s["dense"],
             "packed [T, words]": case["tree_mask"]}
    if s["bits"] is not None:
        masks["BITPACKING uint8" if max(q_lens) <= 8 else "BITPACKING int32"] = (
            s["bits"].astype(np.uint8) if max(q_lens) <= 8 else s["bits"].view(np.int32))
        if max(q_lens) <= 16:
            masks["BITPACKING uint16"] = s["bits"].astype(np.uint16)
    for gname, g in gathers.items():
        for mname, m in masks.items():
            out, lse = v.run(case["q"], case["kv_cache"], custom_mask=m, **g)
            what = "%s, %s (seed %d)" % (gname, mname, seed)
            assert np.array_equal(out, want_out), what
            assert np.array_equal(lse, want_lse), what
    # SGLang's flat shapes: q [T, H*W], pool [pool, W]
    out, _ = v.run(case["q"].reshape(case["T"], -1), case["kv_cache"].reshape(-1, 80),
                   kv_indptr=s["kv_indptr"], kv_indices=s["kv_indices"],
                   out_cache_loc=s["out_cache_loc"], custom_mask=s["full"])
    assert np.array_equal(out, want_out)
    # the page table and packed mask the adapter builds are the library's
    pt = v.page_table(s["kv_indptr"], s["kv_indices"], s["out_cache_loc"])
    for b, n in enumerate(case["kv_lens"]):
        assert np.array_equal(pt[b, :n], case["page_table"][b, :n])
    assert np.array_equal(v.tree_mask(s["full"]), case["tree_mask"])
    v.close()


def test_sglang_adapter_bad_inputs(seed):
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=2, Dl=16, Dr=8, dtype="f32", page_size=1,
                     reqs=[(3, 10, "random"), (3, 4, "chain")])
    v = SGLangVerifier(2, case["scale"], d_latent=16, d_rope=8, dtype="f32", backend="cpu")
    with pytest.raises(mv.InvalidArgumentError, match="call plan"):
        v.run(case["q"], case["kv_cache"], page_table=case["page_table"])
    v.plan([10, 4], 3)
    with pytest.raises(mv.InvalidArgumentError, match="neither FULL_MASK"):
        v.run(case["q"], case["kv_cache"], page_table=case["page_table"][:, :13].copy(),
              custom_mask=np.ones(7, dtype=bool))
    with pytest.raises(mv.InvalidArgumentError, match="give kv_indptr and kv_indices"):
        v.run(case["q"], case["kv_cache"], kv_indptr=[0, 10, 14])
    with pytest.raises(mv.InvalidArgumentError, match="not both"):
        v.run(case["q"], case["kv_cache"], page_table=case["page_table"][:, :13].copy(),
              kv_indptr=[0, 10, 14], kv_indices=np.arange(14))
    with pytest.raises(mv.InvalidArgumentError, match="kv_buffer has shape"):
        v.run(case["q"], case["kv_cache"].reshape(-1, 2, 12),
              page_table=case["page_table"][:, :13].copy())


def test_sglang_adapter_capture_roundtrip(tmp_path, cli, seed):
    """adapter.capture -> gen --expect-from -> check: the step becomes a golden bundle (used
    pool rows only, tree recovered from the FULL_MASK)."""
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=4, Dl=64, Dr=16, dtype="bf16", page_size=1,
                     reqs=[(6, 50, "bushy"), (6, 0, "random")], spare_pages=400,
                     poison=False)
    s = _sglang_inputs(case, rng)
    v = SGLangVerifier(4, case["scale"], d_latent=64, d_rope=16, dtype="bf16", backend="cpu")
    v.plan([50, 0], 6)
    inputs, bundle = str(tmp_path / "step.in.safetensors"), str(tmp_path / "step.safetensors")
    info = v.capture(inputs, case["q"], case["kv_cache"], kv_indptr=s["kv_indptr"],
                     kv_indices=s["kv_indices"], out_cache_loc=s["out_cache_loc"],
                     custom_mask=s["full"], metadata={"engine": "sglang-test"})
    assert info["pages"] == 62  # 56 + 6 rows used of a pool of 462
    got, meta = mv.read_bundle(inputs)
    assert meta["engine"] == "sglang-test" and got["kv_cache"].shape == (62, 1, 80)
    assert np.array_equal(got["tree_parents"], case["parents"])
    mv.complete_bundle(inputs, bundle, cli=cli, args=["--readout-tries", "4"])
    ok, report = mv.check_bundle(bundle, backend="cpu", cli=cli)
    assert ok, report
