"""Golden bundles from Python: capture_bundle -> `mlaverify gen --expect-from` -> `mlaverify
check`, and golden/write_bundle.py as a thin command line over mlaverify.bundle."""
import os
import subprocess
import sys

import numpy as np
import pytest

import mlaverify as mv
from mlaverify import bundle
from mlav_testutil import as_f64, make_case, plan_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WRITE_BUNDLE = os.path.join(ROOT, "golden", "write_bundle.py")


@pytest.mark.parametrize("dtype,page_size,compact", [("bf16", 16, True), ("f32", 1, False),
                                                     ("f16", 64, True)])
def test_bundle_capture_check_roundtrip(tmp_path, cli, seed, dtype, page_size, compact):
    rng = np.random.default_rng(seed)
    case = make_case(rng, H=8, Dl=512, Dr=64, dtype=dtype, page_size=page_size,
                     reqs=[(9, 200, "random"), (5, 0, "bushy"), (1, 40, "chain")],
                     spare_pages=30)
    inputs, out = str(tmp_path / "in.safetensors"), str(tmp_path / "b.safetensors")
    info = mv.capture_bundle(inputs, q=case["q"], kv_cache=case["kv_cache"],
                             page_table=case["page_table"], q_indptr=case["q_indptr"],
                             kv_lens=case["kv_lens"], softmax_scale=case["scale"],
                             tree_mask=case["tree_mask"], dtype=dtype, compact=compact,
                             metadata={"seed": seed})
    got, meta = mv.read_bundle(inputs)
    assert meta["format"] == "mlaverify-bundle" and meta["seed"] == str(seed)
    assert np.array_equal(got["tree_parents"], case["parents"])
    used = int(sum(-(-int(k) // page_size) for k in case["kv_lens"]))
    assert info["pages"] == (used if compact else case["kv_cache"].shape[0])
    assert got["kv_cache"].shape[0] == info["pages"]
    # a few readout seeds are enough: check skips the tokens that stay indecisive
    report = mv.complete_bundle(inputs, out, cli=cli, args=["--readout-tries", "4"])
    assert "wrote" in report
    for backend in ("cpu", "reference"):
        ok, text = mv.check_bundle(out, backend=backend, cli=cli)
        assert ok, "%s (seed %d)" % (text, seed)
    # the CLI's oracle and the binding agree on what the tensors mean
    done, _ = mv.read_bundle(out)
    with plan_for(case, "reference") as plan:
        o, l = plan.run(case["q"], case["kv_cache"], case["page_table"], case["tree_mask"])
    err = np.linalg.norm(as_f64(o, dtype) - done["expect_out"]) / np.linalg.norm(
        done["expect_out"])
    assert err <= {"f32": 1e-6, "bf16": 3e-3, "f16": 3e-4}[dtype], (err, seed)
    assert np.allclose(l, done["expect_lse"], atol=1e-5)


def test_bundle_capture_chain_default_and_errors(tmp_path):
    case = make_case(np.random.default_rng(2), H=2, Dl=16, Dr=8, dtype="f32", page_size=4,
                     reqs=[(4, 3, "chain"), (2, 0, "chain")], causal=True)
    p = str(tmp_path / "c.safetensors")
    mv.capture_bundle(p, q=case["q"], kv_cache=case["kv_cache"],
                      page_table=case["page_table"], q_indptr=case["q_indptr"],
                      kv_lens=case["kv_lens"], softmax_scale=1.0, d_latent=16)
    got, _ = mv.read_bundle(p)
    assert got["tree_parents"].tolist() == [-1, 0, 1, 2, -1, 0]
    with pytest.raises(ValueError, match="say dtype='bf16'"):
        mv.capture_bundle(p, q=case["q"].view(np.uint32).astype(np.uint16),
                          kv_cache=case["kv_cache"], page_table=case["page_table"],
                          q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                          softmax_scale=1.0, d_latent=16)
    pt = case["page_table"].copy()
    pt[0, 0] = 999
    with pytest.raises(ValueError, match="outside"):
        mv.capture_bundle(p, q=case["q"], kv_cache=case["kv_cache"], page_table=pt,
                          q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
                          softmax_scale=1.0, d_latent=16)


def test_bundle_write_bundle_cli_demo_is_the_module(tmp_path):
    """golden/write_bundle.py --demo writes exactly what mlaverify.bundle.demo writes."""
    a, b = str(tmp_path / "cli.safetensors"), str(tmp_path / "mod.safetensors")
    r = subprocess.run([sys.executable, WRITE_BUNDLE, "--demo", a], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    bundle.demo(b)
    assert open(a, "rb").read() == open(b, "rb").read()
    r = subprocess.run([sys.executable, WRITE_BUNDLE], capture_output=True, text=True)
    assert r.returncode == 2 and "write_bundle.py" in r.stderr


def test_bundle_write_bundle_cli_npz_and_module_import(tmp_path, cli):
    case = make_case(np.random.default_rng(3), H=2, Dl=32, Dr=8, dtype="f32", page_size=2,
                     reqs=[(3, 4, "bushy")])
    npz = str(tmp_path / "cap.npz")
    np.savez(npz, q=case["q"], kv_cache=case["kv_cache"], page_table=case["page_table"],
             q_indptr=case["q_indptr"], kv_lens=case["kv_lens"],
             tree_parents=case["parents"], softmax_scale=np.float32(case["scale"]))
    inputs = str(tmp_path / "in.safetensors")
    r = subprocess.run([sys.executable, WRITE_BUNDLE, "--npz", npz, "--d-latent", "32",
                        "--dtype", "f32", inputs], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got, meta = mv.read_bundle(inputs)
    assert meta["source"] == "golden/write_bundle.py --npz " + npz
    assert np.array_equal(got["q"], case["q"])
    mv.complete_bundle(inputs, str(tmp_path / "b.safetensors"), cli=cli)
    # the old module interface: `from write_bundle import write_bundle` in golden/
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from write_bundle import write_bundle, read_bundle, bf16_bits, bf16_to_f32\n"
            "import mlaverify.bundle as m; assert write_bundle is m.write_bundle\n"
            "print('ok')" % os.path.dirname(WRITE_BUNDLE))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
