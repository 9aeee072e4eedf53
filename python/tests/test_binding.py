"""The binding itself: loading, version, status names, and that the ctypes structs match the
header (compiled offsets, and field-by-field round trips through the library's validation)."""
import ctypes
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import mlaverify as mv
from mlaverify import _lib
from mlaverify.errors import check

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "include", "mlaverify.h")


def test_binding_version_matches_header():
    text = open(HEADER).read()
    v = [int(re.search(r"#define MLAV_VERSION_%s (\d+)" % k, text).group(1))
         for k in ("MAJOR", "MINOR", "PATCH")]
    assert mv.version() == "%d.%d.%d" % tuple(v)
    assert tuple(v[:2]) == _lib.EXPECTED_VERSION[:2]


def test_binding_status_names_match_library():
    lib = _lib.load()
    for status, name in mv.errors._NAMES.items():
        assert _lib.text(lib.mlav_status_string(status)) == name
    text = open(HEADER).read()
    for name, value in re.findall(r"(MLAV_(?:OK|ERR_\w+)) = (\d+)", text):
        assert mv.errors._NAMES[int(value)] == name


def test_binding_enums_match_header():
    text = open(HEADER).read()
    for name, value in re.findall(r"MLAV_BACKEND_(\w+) = (\d+)", text):
        assert mv.BACKENDS[name.lower().replace("_", "-")] == int(value)
    for name, value in re.findall(r"MLAV_DTYPE_(\w+) = (\d+)", text):
        assert mv.DTYPES[name.lower()] == int(value)
    for name, value in re.findall(r"MLAV_MEM_(\w+) = (\d+)", text):
        assert getattr(mv.api, "MEM_" + name) == int(value)


_LAYOUT_C = r"""
#include <stddef.h>
#include <stdio.h>
#include "mlaverify.h"
#define F(s, f) printf("%s.%s %zu %zu\n", #s, #f, offsetof(s, f), sizeof(((s *)0)->f))
int main(void) {
    printf("mlav_problem %zu\nmlav_tensors %zu\n", sizeof(mlav_problem), sizeof(mlav_tensors));
    printf("mlav_limits %zu\nmlav_lengths %zu\n", sizeof(mlav_limits), sizeof(mlav_lengths));
    F(mlav_problem, num_heads); F(mlav_problem, d_latent); F(mlav_problem, d_rope);
    F(mlav_problem, softmax_scale); F(mlav_problem, dtype); F(mlav_problem, page_size);
    F(mlav_problem, batch); F(mlav_problem, q_indptr); F(mlav_problem, kv_lens);
    F(mlav_problem, max_pages); F(mlav_problem, kv_dtype); F(mlav_problem, shard_ranks);
    F(mlav_problem, shard_rank); F(mlav_problem, shard_stripe);
    F(mlav_tensors, memory); F(mlav_tensors, q); F(mlav_tensors, kv_cache);
    F(mlav_tensors, num_pages); F(mlav_tensors, page_table); F(mlav_tensors, tree_mask);
    F(mlav_tensors, out); F(mlav_tensors, lse); F(mlav_tensors, kv_scale);
    F(mlav_tensors, kv_scale_ptr); F(mlav_tensors, page_table_rows);
    F(mlav_tensors, page_table_num_rows);
    F(mlav_limits, max_batch); F(mlav_limits, max_tokens); F(mlav_limits, max_q_len);
    F(mlav_limits, max_kv_len);
    F(mlav_lengths, memory); F(mlav_lengths, batch); F(mlav_lengths, q_indptr);
    F(mlav_lengths, kv_lens);
    return 0;
}
"""


def test_binding_struct_layout_compiled():
    """sizeof / offsetof from the header, compiled, against the ctypes structs."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to compile the layout probe (the round-trip tests still run)")
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        open(src, "w").write(_LAYOUT_C)
        subprocess.run([cc, "-std=c11", "-I", os.path.dirname(HEADER), src, "-o", exe],
                       check=True)
        lines = subprocess.run([exe], check=True, capture_output=True,
                               text=True).stdout.split("\n")
    structs = {"mlav_problem": _lib.MlavProblem, "mlav_tensors": _lib.MlavTensors,
               "mlav_limits": _lib.MlavLimits, "mlav_lengths": _lib.MlavLengths}
    seen = 0
    for line in filter(None, lines):
        parts = line.split()
        if len(parts) == 2:
            assert ctypes.sizeof(structs[parts[0]]) == int(parts[1]), line
        else:
            sname, field = parts[0].split(".")
            desc = getattr(structs[sname], field)
            assert (desc.offset, desc.size) == (int(parts[1]), int(parts[2])), line
            seen += 1
    assert seen == sum(len(s._fields_) for s in structs.values())


def _problem():
    return mv.Problem(num_heads=2, d_latent=8, d_rope=4, softmax_scale=0.5, dtype="f32",
                      page_size=2, q_indptr=[0, 2, 3], kv_lens=[5, 1], max_pages=3)


def _plan_error(st):
    lib = _lib.load()
    ctx = mv.Context("cpu")
    h = ctypes.c_void_p()
    with pytest.raises(mv.MlavError) as e:
        check(lib.mlav_plan_create(ctx._h, ctypes.byref(st), ctypes.byref(h)))
    return e.value


@pytest.mark.parametrize("field,value,expect", [
    ("num_heads", 0, "num_heads = 0"),
    ("d_latent", -3, "d_latent = -3"),
    ("d_rope", -1, "d_rope = -1"),
    ("softmax_scale", math.inf, "softmax_scale = inf"),
    ("dtype", 7, "dtype = 7"),
    ("page_size", 0, "page_size = 0"),
    ("batch", 0, "batch = 0"),
    ("max_pages", 0, "max_pages = 0"),
    ("max_pages", 2, "exceeds max_pages * page_size = 4"),
    ("kv_dtype", 7, "kv_dtype = 7"),
    ("kv_dtype", 1, "kv_dtype = 1 (bf16) with dtype f32"),
])
def test_binding_problem_field_roundtrip(field, value, expect):
    """Each field reaches the library at its offset: a bad value comes back named."""
    p = _problem()
    st = p._struct()
    setattr(st, field, value)
    err = _plan_error(st)
    assert isinstance(err, mv.InvalidArgumentError)
    assert expect in err.sentence, err.sentence
    assert str(err).startswith("MLAV_ERR_INVALID_ARG: ")


def test_binding_problem_pointer_roundtrip():
    p = _problem()
    st = p._struct()
    bad_indptr = np.array([1, 2, 3], dtype=np.int32)
    st.q_indptr = bad_indptr.ctypes.data
    assert "q_indptr[0] = 1" in _plan_error(st).sentence
    st = p._struct()
    bad_kv = np.array([5, 0], dtype=np.int32)
    st.kv_lens = bad_kv.ctypes.data
    assert "kv_lens[1] = 0 is less than q_len 1" in _plan_error(st).sentence
    # and the good one plans: the ints after the pointers are read where they are
    with mv.Plan(p, backend="cpu") as plan:
        assert plan.backend == "cpu"


def test_binding_kv_scale_fields_roundtrip():
    """kv_scale and kv_scale_ptr reach the library at their offsets: a bad host scale comes
    back named (validation, before any backend runs), and kv_dtype is read from its field."""
    p = mv.Problem(num_heads=2, d_latent=8, d_rope=4, softmax_scale=0.5, dtype="f32",
                   page_size=2, q_indptr=[0, 2, 3], kv_lens=[5, 1], max_pages=3,
                   kv_dtype="fp8_e4m3")
    assert p._struct().kv_dtype == 3
    q, _, pt, mask, out, lse = _inputs(_problem())
    kv = np.full((4, 2, 12), 0x38, dtype=np.uint8)  # e4m3 1.0
    bad = np.array([-2.0], dtype=np.float32)
    with mv.Plan(p, backend="cpu") as plan:
        t = _lib.MlavTensors(memory=0, q=q.ctypes.data, kv_cache=kv.ctypes.data, num_pages=4,
                             page_table=pt.ctypes.data, tree_mask=mask.ctypes.data,
                             out=out.ctypes.data, lse=lse.ctypes.data, kv_scale=float("nan"))
        ws = plan._host_ws.ctypes.data if plan._host_ws is not None else None
        with pytest.raises(mv.InvalidArgumentError) as e:
            check(_lib.load().mlav_run(plan._h, ctypes.byref(t), ws, plan.workspace_bytes,
                                       None))
        assert "tensors.kv_scale = nan" in e.value.sentence, e.value.sentence
        t.kv_scale_ptr = bad.ctypes.data  # overrides the value
        with pytest.raises(mv.InvalidArgumentError) as e:
            check(_lib.load().mlav_run(plan._h, ctypes.byref(t), ws, plan.workspace_bytes,
                                       None))
        assert "*tensors.kv_scale_ptr = -2" in e.value.sentence, e.value.sentence


def _inputs(p):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((3, 2, 12)).astype(np.float32)
    kv = rng.standard_normal((4, 2, 12)).astype(np.float32)
    pt = np.array([[0, 1, 2], [3, 3, 3]], dtype=np.int32)
    mask = mv.tree_mask_from_parents([-1, 0, -1], p.q_indptr)
    out = np.zeros((3, 2, 8), dtype=np.float32)
    lse = np.zeros((3, 2), dtype=np.float32)
    return q, kv, pt, mask, out, lse


@pytest.mark.parametrize("field,value,expect,status", [
    ("memory", 5, "tensors.memory = 5", mv.InvalidArgumentError),
    ("memory", 1, "needs host tensors; these are device memory", mv.UnsupportedError),
    ("num_pages", 0, "num_pages = 0 must be >= 1", mv.InvalidArgumentError),
    ("num_pages", 3, "page_table[1][0] = 3 is outside [0, num_pages = 3)",
     mv.InvalidArgumentError),
    ("q", None, "q and out must not be NULL", mv.InvalidArgumentError),
    ("out", None, "q and out must not be NULL", mv.InvalidArgumentError),
    ("kv_cache", None, "kv_cache and page_table must not be NULL", mv.InvalidArgumentError),
    ("page_table", None, "kv_cache and page_table must not be NULL", mv.InvalidArgumentError),
])
def test_binding_tensors_field_roundtrip(field, value, expect, status):
    """Each mlav_tensors field reaches the library at its offset."""
    p = _problem()
    q, kv, pt, mask, out, lse = _inputs(p)
    with mv.Plan(p, backend="cpu") as plan:
        t = _lib.MlavTensors(memory=0, q=q.ctypes.data, kv_cache=kv.ctypes.data, num_pages=4,
                             page_table=pt.ctypes.data, tree_mask=mask.ctypes.data,
                             out=out.ctypes.data, lse=lse.ctypes.data)
        check(_lib.load().mlav_run(plan._h, ctypes.byref(t), plan._host_ws.ctypes.data,
                                   plan.workspace_bytes, None))
        setattr(t, field, value)
        with pytest.raises(mv.MlavError) as e:
            check(_lib.load().mlav_run(plan._h, ctypes.byref(t), plan._host_ws.ctypes.data,
                                       plan.workspace_bytes, None))
    if status is not None:
        assert isinstance(e.value, status)
    assert expect in e.value.sentence, e.value.sentence


def test_binding_tree_mask_and_lse_pointers():
    """tree_mask is read from its field (a bit past q_len is named), and out / lse are written
    where their fields point (the same numbers as the one-shot run)."""
    p = _problem()
    q, kv, pt, mask, out, lse = _inputs(p)
    bad = mask.copy()
    bad[2, 0] |= 2  # request 1 has one node
    with mv.Plan(p, backend="cpu") as plan:
        with pytest.raises(mv.InvalidArgumentError, match="tree_mask row 2"):
            plan.run(q, kv, pt, bad)
        o1, l1 = plan.run(q, kv, pt, mask, out=out, lse=lse)
        assert o1 is out and l1 is lse
        o2, l2 = plan.run(q, kv, pt, mask, lse=False)
    assert l2 is None
    assert np.array_equal(o1, o2) and np.all(np.isfinite(l1)) and np.any(l1 != 0)


def _run_python(code, env):
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.path.join(ROOT, "python")
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True)


def test_binding_library_not_found_names_what_was_tried():
    r = _run_python("import mlaverify as mv\nmv.version()",
                    {"MLAVERIFY_LIBRARY": "/nonexistent/libmlaverify.so"})
    assert r.returncode != 0
    assert "LibraryNotFoundError" in r.stderr and "/nonexistent/libmlaverify.so" in r.stderr


def test_binding_import_needs_no_library():
    """Importing the package (and writing bundles) does not load the library."""
    r = _run_python("import mlaverify, mlaverify.bundle, mlaverify.sglang; print('ok')",
                    {"MLAVERIFY_LIBRARY": "/nonexistent/libmlaverify.so"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_binding_library_from_directory_and_next_to_package(tmp_path):
    """MLAVERIFY_LIBRARY may name a folder; without it a copy next to the package is found."""
    libfile = os.path.realpath(_lib.path())
    r = _run_python("import mlaverify as mv; print(mv.version())",
                    {"MLAVERIFY_LIBRARY": os.path.dirname(libfile)})
    assert r.returncode == 0 and r.stdout.strip() == mv.version(), r.stderr
    pkg = tmp_path / "mlaverify"
    shutil.copytree(os.path.join(ROOT, "python", "mlaverify"), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "*.so*"))
    shutil.copy(libfile, pkg / "libmlaverify.so")
    env = dict(os.environ)
    env.pop("MLAVERIFY_LIBRARY", None)
    env["PYTHONPATH"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c",
                        "import mlaverify as mv; print(mv.version(), mv._lib.path())"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[1] == str(pkg / "libmlaverify.so")
