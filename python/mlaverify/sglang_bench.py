"""The SGLang backend's costs on a GPU host: ``python -m mlaverify.sglang_bench``.

1. Per layer: MlaVerifyAttnBackend.forward (the per-layer path of an eager step) over a bare
   mlav_run on prebuilt ctypes structs, at a DeepSeek-V3 / Kimi K2 TP8 shape (16 heads,
   512 + 64, BF16, 8 draft tokens, 16 requests): mlaverify.overhead's paired samples, host time
   to enqueue (the device synchronized before each sample).
2. Per step: init_forward_metadata_out_graph (what runs before every graph replay) at batch 1,
   16, 64 and max_kv_len 4096 and 200000, with the request rows gathered into a private page
   table every step (page_table="copy": B x max_kv_len int32, before issue 36's item 5) and
   with B indices into req_to_token read in place (page_table="rows": after). DFlash-like
   causal blocks of 8 (no mask to pack: the page table is what differs), every prefix
   max_kv_len - 8. Each figure is the median over samples of the mean over calls, the device
   synchronized at the end of each sample: device time included.

    python -m mlaverify.sglang_bench [--device cuda] [--json]
"""
import argparse
import json
import statistics
import sys
import time

from . import _lib
from . import overhead


def _per_step_us(fn, sync, calls, repeats):
    fn()
    sync()
    xs = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        xs.append((time.perf_counter() - t0) / calls)
    return statistics.median(xs) * 1e6


class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def metadata_matrix(device, batches=(1, 16, 64), kv_lens=(4096, 200000), heads=16,
                    d_latent=512, d_rope=64, draft=8, calls=50, repeats=11, dtype="bf16"):
    """{(page_table, batch, max_kv_len): microseconds per step}."""
    import torch
    from .sglang_backend import MlaVerifyAttnBackend, library_reads_page_table_rows
    cuda = device != "cpu"
    dev = torch.device(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    modes = ["copy"] + (["rows"] if library_reads_page_table_rows() else [])
    max_b = max(batches)
    res = {}
    for K in kv_lens:
        # SGLang's request pool: row 0 is its padding row, requests 1..max_b
        r2t = torch.randint(0, 1 << 20, (max_b + 1, K), dtype=torch.int32, device=dev)
        for mode in modes:
            be = MlaVerifyAttnBackend(heads, 0.1, draft, r2t, max_batch=max_b, d_latent=d_latent,
                                      d_rope=d_rope, dtype=dtype, device=dev,
                                      backend="cuda" if cuda else "cpu", mask_mode="causal",
                                      page_table=mode)
            be.init_cuda_graph_state(max_b, max_b * draft)
            for B in batches:
                fb = _Obj(forward_mode=overhead._Mode(), batch_size=B,
                          req_pool_indices=torch.arange(1, B + 1, dtype=torch.int64,
                                                        device=dev),
                          seq_lens=torch.full((B,), K - draft, dtype=torch.int64, device=dev),
                          spec_info=None)
                res[(mode, B, K)] = _per_step_us(
                    lambda: be.init_forward_metadata_out_graph(fb), sync, calls, repeats)
            be.close()
        del r2t
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m mlaverify.sglang_bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda (default when torch sees one) or cpu")
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--kv-lens", default="4096,200000")
    ap.add_argument("--calls", type=int, default=50, help="per-step calls per sample (50)")
    ap.add_argument("--repeats", type=int, default=11, help="samples, the median kept (11)")
    ap.add_argument("--layer-calls", type=int, default=200)
    ap.add_argument("--layer-repeats", type=int, default=41)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    import torch
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = device != "cpu"
    dl, dr, dtype = (512, 64, "bf16") if cuda else (64, 16, "f32")
    layer = overhead.measure(a.layer_calls, a.layer_repeats, a.heads, dl, dr, 8, 16, device,
                             dtype)
    matrix = metadata_matrix(device, [int(x) for x in a.batches.split(",")],
                             [int(x) for x in a.kv_lens.split(",")], heads=a.heads,
                             d_latent=dl, d_rope=dr, calls=a.calls, repeats=a.repeats,
                             dtype=dtype)
    if a.json:
        print(json.dumps({"per_layer": {k: layer[k] for k in ("bare", "sglang")},
                          "per_layer_over_bare": layer["sglang_over"],
                          "per_step_us": {"%s B=%d kv=%d" % k: round(v, 2)
                                          for k, v in matrix.items()}}, indent=1))
        return 0
    print("libmlaverify %s from %s; torch %s; %s; H=%d Dl=%d Dr=%d n=8 %s"
          % (_lib.text(_lib.load().mlav_version_string()), _lib.path(), torch.__version__,
             torch.cuda.get_device_name() if cuda else "cpu", a.heads, dl, dr, dtype))
    print("per layer, B=16 (us per call): bare mlav_run %.2f, MlaVerifyAttnBackend.forward "
          "%.2f: over bare %+.2f (median) %+.2f (fastest)"
          % ((layer["bare"], layer["sglang"]) + layer["sglang_over"]))
    print("per step, init_forward_metadata_out_graph (us, device included):")
    print("  %8s %10s %14s %14s %10s" % ("batch", "max_kv_len", "copy (before)", "rows (after)",
                                         "copied MB"))
    Ks = sorted({k[2] for k in matrix})
    Bs = sorted({k[1] for k in matrix})
    for K in Ks:
        for B in Bs:
            rows = matrix.get(("rows", B, K))
            print("  %8d %10d %14.2f %14s %10.1f"
                  % (B, K, matrix[("copy", B, K)],
                     "%.2f" % rows if rows is not None else "n/a", B * K * 4 / 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main())
