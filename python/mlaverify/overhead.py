"""What the Python layers cost over a bare ctypes mlav_run: ``python -m mlaverify.overhead``.

Per layer it times, on one CPU plan for limits of tiny shapes (so the kernel itself is a few
microseconds and the difference is the binding's own work):

    bare        lib.mlav_run(plan, &tensors, ws, bytes, NULL) on prebuilt ctypes structs
    steps       StepPlan.run(q, kv, page_table, mask, out=, lse=)  (numpy and CPU torch)
    sglang      MlaVerifyAttnBackend.forward(q, None, None, layer, forward_batch)
    sglang_op   the same backend with custom_op=True (torch.ops.mlaverify.verify_step)
    torch_op    torch.ops.mlaverify.verify_step(q, kv, page_table, mask, plan.id, d_latent)

and per step (once, whatever the layer count):

    bare_update     lib.mlav_plan_update on a prebuilt struct of host lengths
    steps_update    StepPlan.update(q_indptr, kv_lens) (int32 numpy, and CPU torch)
    sglang_metadata init_forward_metadata_out_graph (request rows, kv_lens, mask packing,
                    StepPlan.update), once per mask mode; _copy: the rows gathered into a
                    private page table instead of read in place (page_table="copy")

Each figure is the median over `--repeats` samples of the mean over `--calls` calls, with the
garbage collector off while a sample runs; "over bare" is the median of each sample minus a
sample of the bare call taken just before it, so that a busy machine's drift cancels, and
"fastest" the fastest sample minus the bare call's fastest: on a shared machine the steadier
figure. On a GPU host the same paths run on
CUDA tensors with ``--device cuda`` (the update then takes device lengths; the figures are host
time to enqueue, the device synchronized before each sample so the launch queue never fills).
"""
import argparse
import ctypes
import gc
import json
import statistics
import sys
import time

import numpy as np

from . import _lib
from .steps import StepPlan
from .tree import tree_mask_from_parents


_sync = None  # torch.cuda.synchronize when timing CUDA paths


def _sample(fn, calls):
    """Mean seconds per call of `calls` calls of fn()."""
    if _sync is not None:
        _sync()
    gc_was = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
    finally:
        if gc_was:
            gc.enable()
    return (t1 - t0) / calls


def median_us(fn, calls, repeats):
    """Median over `repeats` samples of the mean microseconds per call of fn()."""
    fn()  # warm-up (allocations made once, import costs)
    return statistics.median(_sample(fn, calls) for _ in range(repeats)) * 1e6


def paired_us(fn, ref, calls, repeats):
    """(median microseconds per call of fn(), (median of fn's sample minus ref's sample taken
    just before it, fn's fastest sample minus ref's fastest)): pairing the samples keeps a
    busy machine's drift out of the difference; the fastest samples are the ones least touched
    by other processes."""
    fn()
    ref()
    per, refs, diff = [], [], []
    for _ in range(repeats):
        r = _sample(ref, calls)
        f = _sample(fn, calls)
        per.append(f)
        refs.append(r)
        diff.append(f - r)
    return statistics.median(per) * 1e6, (statistics.median(diff) * 1e6,
                                          (min(per) - min(refs)) * 1e6)


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Mode:
    """SGLang's ForwardMode.TARGET_VERIFY as the backend reads it."""

    def is_idle(self):
        return False

    def is_target_verify(self):
        return True

    def is_decode(self):
        return False


class _Pool:
    def __init__(self, buf):
        self.buf = buf

    def get_key_buffer(self, layer_id):
        return self.buf


def measure(calls=500, repeats=41, heads=1, d_latent=64, d_rope=16, draft=1, batch=1,
            device="cpu", dtype="f32"):
    """{name: microseconds per call, name_over: (median, fastest) over the bare call} for the
    paths of the module doc."""
    torch = None
    try:
        import torch
    except ImportError:
        pass
    cuda = device != "cpu"
    if cuda and torch is None:
        raise SystemExit("--device %s needs torch" % device)
    W = d_latent + d_rope
    n, B = draft, batch
    T, kvmax = B * n, n + 1
    rows = B * kvmax
    rng = np.random.default_rng(0)
    res = {}
    lib = _lib.load()
    global _sync
    _sync = torch.cuda.synchronize if cuda else None

    plan = StepPlan(heads, 0.125, dtype, 1, kvmax, B, T, n, kvmax, d_latent=d_latent,
                    d_rope=d_rope, backend="cuda" if cuda else "cpu",
                    device=device if cuda else None)
    q_indptr = (np.arange(B + 1) * n).astype(np.int32)
    kv_lens = np.full(B, kvmax, np.int32)
    q = rng.uniform(-1, 1, (T, heads, W)).astype(np.float32)
    kv = rng.uniform(-1, 1, (rows, 1, W)).astype(np.float32)
    pt = np.arange(rows, dtype=np.int32).reshape(B, kvmax)
    mask = tree_mask_from_parents(np.tile(np.arange(n) - 1, B), q_indptr, words=plan.mask_words)
    out = np.empty((T, heads, d_latent), np.float32)
    lse = np.empty((T, heads), np.float32)
    numpy_ok = not cuda and plan.dtype == "f32"
    if torch is not None:
        tdt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[plan.dtype]
        tq, tkv, tout = (torch.from_numpy(x).to(tdt) for x in (q, kv, out))
        tpt, tmask, tlse = (torch.from_numpy(pt), torch.from_numpy(mask.view(np.int32)),
                            torch.from_numpy(lse))
        tqi, tkl = torch.from_numpy(q_indptr), torch.from_numpy(kv_lens)
        if cuda:
            tq, tkv, tout, tpt, tmask, tlse, tqi, tkl = (
                x.to(device) for x in (tq, tkv, tout, tpt, tmask, tlse, tqi, tkl))
    elif not numpy_ok:
        raise SystemExit("dtype %s on numpy needs torch" % plan.dtype)
    plan.update(tqi if cuda else q_indptr, tkl if cuda else kv_lens)

    # -- bare ctypes: structs built once, the call only ---------------------------------------
    h, ws, wsb = plan._h, plan._ws_ptr, plan.workspace_bytes
    run_fn, upd_fn = lib.mlav_run, lib.mlav_plan_update
    if torch is not None:
        ptrs = [x.data_ptr() for x in (tq, tkv, tpt, tmask, tout, tlse, tqi, tkl)]
    else:
        ptrs = [x.ctypes.data for x in (q, kv, pt, mask, out, lse, q_indptr, kv_lens)]
    mem = 1 if cuda else 0
    t = _lib.MlavTensors(memory=mem, q=ptrs[0], kv_cache=ptrs[1], num_pages=rows,
                         page_table=ptrs[2], tree_mask=ptrs[3], out=ptrs[4], lse=ptrs[5])
    L = _lib.MlavLengths(memory=mem, batch=B, q_indptr=ptrs[6], kv_lens=ptrs[7])
    stream = torch.cuda.current_stream().cuda_stream if cuda else None
    tref, lref = ctypes.byref(t), ctypes.byref(L)
    st = run_fn(h, tref, ws, wsb, stream)
    if st:
        raise SystemExit("the bare mlav_run failed: " + _lib.text(lib.mlav_last_error(None)))

    def bare():
        run_fn(h, tref, ws, wsb, stream)

    def bare_update():
        upd_fn(h, lref, ws, wsb, stream)

    res["bare"] = median_us(bare, calls, repeats)
    res["bare_update"] = median_us(bare_update, calls, repeats)

    def layer(name, fn):
        res[name], res[name + "_over"] = paired_us(fn, bare, calls, repeats)

    def step(name, fn):
        res[name], res[name + "_over"] = paired_us(fn, bare_update, calls, repeats)

    # -- StepPlan -----------------------------------------------------------------------------
    if numpy_ok:
        layer("steps_numpy", lambda: plan.run(q, kv, pt, mask, out=out, lse=lse))
        step("steps_update_numpy", lambda: plan.update(q_indptr, kv_lens))
    if torch is None:
        plan.close()
        return res
    layer("steps_torch", lambda: plan.run(tq, tkv, tpt, tmask, out=tout, lse=tlse))
    step("steps_update_torch", lambda: plan.update(tqi, tkl))

    # -- the torch op -------------------------------------------------------------------------
    from . import torch_ops
    if torch_ops.REGISTERED:
        op, pid = torch.ops.mlaverify.verify_step, plan.id
        layer("torch_op", lambda: op(tq, tkv, tpt, tmask, pid, d_latent))
        # what the op's two fresh outputs cost by themselves
        dev = tq.device
        res["torch_op_allocs"] = median_us(
            lambda: (torch.empty((T, heads, d_latent), dtype=tdt, device=dev),
                     torch.empty((T, heads), dtype=torch.float32, device=dev)), calls, repeats)

    # -- the SGLang backend -------------------------------------------------------------------
    from .sglang_backend import MlaVerifyAttnBackend
    r2t = torch.arange(rows, dtype=torch.int32).reshape(B, kvmax).to(tq.device)
    pool = _Pool(tkv)
    seq = torch.full((B,), kvmax - n, dtype=torch.int64, device=tq.device)
    rpi = torch.arange(B, dtype=torch.int64, device=tq.device)
    qx = tq.reshape(T, heads * W)
    sg_layer = _Obj(layer_id=0, tp_q_head_num=heads)
    vis = np.tril(np.ones((n, n), bool))
    masks = {
        "causal": None,
        "packed": tmask,
        "qlen": torch.from_numpy(np.tile(vis.reshape(-1), B)).to(tq.device),
    }
    variants = [(False, "auto", "")] + [(False, "copy", "_copy")] + \
        ([(True, "copy", "_op")] if torch_ops.REGISTERED else [])
    for custom_op, page_table, suffix in variants:
        for mode, m in masks.items():
            be = MlaVerifyAttnBackend(heads, 0.125, n, r2t, d_latent=d_latent, d_rope=d_rope,
                                      dtype=plan.dtype, device=tq.device, custom_op=custom_op,
                                      mask_mode="qlen" if mode == "qlen" else "auto",
                                      backend="cuda" if cuda else "cpu", page_table=page_table,
                                      token_to_kv_pool=pool)
            be.init_cuda_graph_state(B, T)
            spec = _Obj(custom_mask=m, draft_token_num=n)
            fm = _Mode()
            fb = _Obj(forward_mode=fm, batch_size=B, req_pool_indices=rpi, seq_lens=seq,
                      out_cache_loc=None, spec_info=spec)

            def meta(be=be, fb=fb):
                be.init_forward_metadata_out_graph(fb)
            meta()
            if not custom_op:
                step("sglang_metadata_" + mode + suffix, meta)
            if mode == "packed" and suffix != "_copy":
                layer("sglang" + suffix,
                      lambda be=be, fb=fb: be.forward(qx, None, None, sg_layer, fb,
                                                      save_kv_cache=False))
            be.close()
    plan.close()
    return res


PER_LAYER = ("steps_numpy", "steps_torch", "sglang", "sglang_op", "torch_op")
PER_STEP = ("steps_update_numpy", "steps_update_torch", "sglang_metadata_causal",
            "sglang_metadata_packed", "sglang_metadata_qlen", "sglang_metadata_causal_copy",
            "sglang_metadata_packed_copy", "sglang_metadata_qlen_copy")


def report(res):
    """The figures as text lines."""
    lines = ["per layer (us per call; over bare mlav_run %.2f us):" % res["bare"]]
    for k in PER_LAYER:
        if k in res:
            lines.append("  %-24s %8.2f   over bare %+8.2f  fastest %+8.2f"
                         % ((k, res[k]) + res[k + "_over"]))
    if "torch_op_allocs" in res:
        lines.append("  %-24s %8.2f   (two torch.empty, inside torch_op)"
                     % ("torch_op_allocs", res["torch_op_allocs"]))
    lines.append("per step (us per call; over bare mlav_plan_update %.2f us):"
                 % res["bare_update"])
    for k in PER_STEP:
        if k in res:
            lines.append("  %-24s %8.2f   over bare %+8.2f  fastest %+8.2f"
                         % ((k, res[k]) + res[k + "_over"]))
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mlaverify.overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=500, help="calls per sample (500)")
    ap.add_argument("--repeats", type=int, default=41, help="samples, the median kept (41)")
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--d-latent", type=int, default=64)
    ap.add_argument("--d-rope", type=int, default=16)
    ap.add_argument("--draft", type=int, default=1, help="draft tokens per request (1)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda[:i]")
    ap.add_argument("--dtype", default=None,
                    help="f32 (the default on cpu), bf16 (on cuda) or f16")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = ap.parse_args(argv)
    dtype = a.dtype or ("f32" if a.device == "cpu" else "bf16")
    res = measure(a.calls, a.repeats, a.heads, a.d_latent, a.d_rope, a.draft, a.batch,
                  a.device, dtype)
    if a.json:
        print(json.dumps({k: ([round(x, 3) for x in v] if isinstance(v, tuple) else
                              round(v, 3)) for k, v in res.items()}, indent=1))
    else:
        torch = sys.modules.get("torch")
        print("libmlaverify %s from %s; python %s, numpy %s, torch %s; H=%d Dl=%d Dr=%d n=%d "
              "B=%d %s on %s" % (_lib.text(_lib.load().mlav_version_string()), _lib.path(),
                                 sys.version.split()[0], np.__version__,
                                 torch.__version__ if torch else "-", a.heads, a.d_latent,
                                 a.d_rope, a.draft, a.batch, dtype, a.device))
        print("\n".join(report(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
