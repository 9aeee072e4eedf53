"""The SGLang backend (mlaverify.sglang_backend) duck-typed, without SGLang: every path against
the reference backend, and each silent wrong answer of issue 36 with the test that catches it.
test_sglang_conformance.py drives the same backend through SGLang's own files; it also checks
the stand-ins here (TokenPool, Mode, Layer) against them."""
import numpy as np
import pytest

import mlaverify as mv
from mlaverify.bundle import e4m3_bits, e4m3_to_f32
from sglang_cases import CpuGraph, World, rel_l2

torch = pytest.importorskip("torch")
from mlaverify.sglang_backend import MlaVerifyAttnBackend  # noqa: E402

H, DL, DR = 4, 64, 16
W = DL + DR
SCALE = 0.125


class Mode:
    """SGLang's ForwardMode as the backend reads it (is_* methods)."""

    def __init__(self, name):
        self.name = name

    def is_target_verify(self):
        return self.name == "TARGET_VERIFY"

    def is_decode(self):
        return self.name == "DECODE"

    def is_idle(self):
        return self.name == "IDLE"

    def is_decode_or_idle(self):
        return self.name in ("DECODE", "IDLE")

    def __repr__(self):
        return "ForwardMode." + self.name


VERIFY, DECODE, IDLE, EXTEND = (Mode(m) for m in ("TARGET_VERIFY", "DECODE", "IDLE", "EXTEND"))


class Layer:
    """RadixAttention's fields the backend reads."""

    def __init__(self, layer_id, heads=H, scaling=SCALE, k_scale=None):
        self.layer_id = layer_id
        self.tp_q_head_num = heads
        self.head_dim = W
        self.v_head_dim = DL
        self.scaling = scaling
        self.k_scale = None if k_scale is None else torch.tensor([k_scale], dtype=torch.float32)
        self.k_scale_float = k_scale


class TokenPool:
    """MLATokenToKVPool's write and read path (memory_pool.py): one [rows, 1, W] buffer per
    layer; writes cast to the pool's dtype and nothing else."""

    def __init__(self, bufs):
        self.kv_buffer = bufs

    def get_key_buffer(self, layer_id):
        return self.kv_buffer[layer_id]

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v):
        buf = self.kv_buffer[layer.layer_id]
        buf[loc_info] = cache_k.reshape(-1, 1, W).to(buf.dtype)

    def set_mla_kv_buffer(self, layer, loc, cache_k_nope, cache_k_rope):
        n = loc.shape[0]
        self.set_kv_buffer(layer, loc, torch.cat([cache_k_nope.reshape(n, 1, DL),
                                                  cache_k_rope.reshape(n, 1, DR)], -1), None)


class Fp8TokenPool(TokenPool):
    """An FP8 E4M3 pool as SGLang's: bytes, written by casting the value (no scaling; the
    cast of torch.float8_e4m3fn, here through the library's own rounding rule)."""

    def set_kv_buffer(self, layer, loc_info, cache_k, cache_v):
        b = e4m3_bits(cache_k.reshape(-1, 1, W).float().numpy())
        self.kv_buffer[layer.layer_id][loc_info] = torch.from_numpy(b)


class Batch:
    def __init__(self, mode, step, spec_info=None, pool=None):
        self.forward_mode = mode
        self.batch_size = step.bs
        self.req_pool_indices = step.req_pool_indices
        self.seq_lens = step.seq_lens
        self.out_cache_loc = step.out_cache_loc
        self.spec_info = spec_info
        if pool is not None:
            self.token_to_kv_pool = pool


class Spec:
    def __init__(self, custom_mask):
        self.custom_mask = custom_mask


def world(seed, n, **kw):
    rng = np.random.default_rng(seed)
    return World(rng, torch, H=H, DL=DL, DR=DR, n=n, reqs=kw.pop("reqs", 9),
                 ctx_len=kw.pop("ctx_len", 48), pool_rows=kw.pop("pool_rows", 500),
                 layers=kw.pop("layers", 2), scale=SCALE, **kw)


def backend(w, **kw):
    kw.setdefault("d_latent", DL)
    kw.setdefault("d_rope", DR)
    kw.setdefault("dtype", "f32")
    kw.setdefault("device", "cpu")
    return MlaVerifyAttnBackend(H, SCALE, w.n, w.req_to_token, **kw)


def pools(w):
    return TokenPool([torch.from_numpy(p.copy()) for p in w.pool_np])


@pytest.mark.parametrize("mode", ["full", "full_u8", "qlen", "bitpacking", "packed", None])
def test_verify_every_mask_mode(seed, mode):
    """Eager steps and (padded) graph-shaped steps, q whole or as q_nope + q_rope, k saved
    first, the torch op too: each layer against the reference."""
    w = world(seed, 6)
    for custom_op in (False, True):
        mm = {"full": "full", "full_u8": "full", "qlen": "qlen"}.get(mode, "auto")
        be = backend(w, custom_op=custom_op, mask_mode=mm)
        be.init_cuda_graph_state(5, 5 * w.n)
        be.plan.workspace[:] = 0xFF
        pool = pools(w)
        for it in range(6):
            real = int(w.rng.integers(1, 6))
            st = w.step(real, bs=5 if it % 2 == 0 else real)
            m = st.mask(mode.replace("_u8", "") if mode else None,
                        torch.uint8 if mode == "full_u8" else None)
            fb = Batch(VERIFY, st, Spec(m), pool)
            be.init_forward_metadata(fb)
            for li in range(w.layers):
                q, k = st.q(), st.k()
                if li == 0:
                    o = be.forward(q, k, k, Layer(li), fb)
                else:
                    q3, k3 = q.view(st.T, H, W), k.view(-1, 1, W)
                    o = be.forward(q3[..., :DL].contiguous(), k3[..., :DL].contiguous(), None,
                                   Layer(li), fb, q_rope=q3[..., DL:].contiguous(),
                                   k_rope=k3[..., DL:].contiguous())
                assert o.shape == (st.T, H * DL)
                st.check(o, q, pool.kv_buffer[li].numpy(), "%s op=%s step %d layer %d"
                         % (mode, custom_op, it, li), seed, causal=mode is None)
        be.close()


def test_decode_and_idle(seed):
    """A decode step is a verify of one node per request (seq_lens count the new token);
    IDLE writes nothing and forward returns an empty [0, H * Dl]."""
    w = world(seed, 4)
    be = backend(w, mask_mode="full")
    pool = pools(w)
    for it in range(4):
        real = int(w.rng.integers(1, 7))
        st = w.step(real, decode=True)
        fb = Batch(DECODE, st, None, pool)
        be.init_forward_metadata(fb)
        q, k = st.q(), st.k()
        o = be.forward(q, k, k, Layer(0), fb)
        st.check(o, q, pool.kv_buffer[0].numpy(), "decode step %d" % it, seed)
    idle = Batch(IDLE, w.step(1), None, pool)
    idle.batch_size = 0
    be.init_forward_metadata(idle)
    e = be.forward(torch.zeros((0, H * W)), None, None, Layer(0), idle)
    assert e.shape == (0, H * DL)
    be.close()


def test_refusals_name_the_fix(seed):
    w = world(seed, 2)
    be = backend(w, max_batch=2)
    st = w.step(1)
    with pytest.raises(mv.UnsupportedError, match="--decode-attention-backend mlaverify"):
        be.init_forward_metadata(Batch(EXTEND, st))
    with pytest.raises(mv.UnsupportedError, match="--prefill-attention-backend"):
        be.forward(st.q(), None, None, Layer(0), Batch(EXTEND, st))
    with pytest.raises(mv.InvalidArgumentError, match="max_batch 2"):
        be.init_forward_metadata(Batch(VERIFY, w.step(3)))
    with pytest.raises(ValueError, match="max_kv_len"):
        backend(w, max_kv_len=w.ctx_len + 1)
    other = Spec(None)
    other.draft_token_num = 3
    with pytest.raises(mv.InvalidArgumentError, match="3 draft tokens per request"):
        be.init_forward_metadata(Batch(VERIFY, st, other))
    ragged = Spec(None)
    ragged.ragged_verify_layout = object()
    with pytest.raises(mv.UnsupportedError, match="ragged"):
        be.init_forward_metadata(Batch(VERIFY, st, ragged))
    be.init_forward_metadata(Batch(VERIFY, st, None, pools(w)))
    with pytest.raises(mv.InvalidArgumentError, match="layer has 5 heads"):
        be.forward(st.q(), None, None, Layer(0, heads=5), Batch(VERIFY, st, None, pools(w)))
    with pytest.raises(mv.InvalidArgumentError, match="decode batch after the metadata"):
        be.forward(st.q(), None, None, Layer(0), Batch(DECODE, st, None, pools(w)))
    be.close()


def test_flat_bool_mask_needs_a_mode(seed):
    """A flat bool mask is FULL_MASK or QLEN_ONLY, which its size cannot tell apart on a padded
    batch: mask_mode='auto' refuses it with a sentence instead of guessing."""
    w = world(seed, 4, ctx_len=16)
    be = backend(w)
    be.init_cuda_graph_state(3, 12)
    st = w.step(1, bs=3, max_prefix=8)
    st.seq[0] = 8
    st.seq_lens[0] = 8
    m = st.mask("full")
    assert m.numel() == 3 * 4 * 4  # the size of QLEN_ONLY for 3 requests
    with pytest.raises(mv.InvalidArgumentError, match="mask_mode"):
        be.init_forward_metadata(Batch(VERIFY, st, Spec(m)))
    be.close()


def test_fast_path_and_pool_checks(seed):
    """The per-layer path takes q in place when it is a whole fixed-shape buffer (the output
    a view of the shared buffer), copies it otherwise; pools it cannot read raise the
    sentence; 3-D and 2-D pools alike."""
    w = world(seed, 3, layers=1)
    be = backend(w, mask_mode="packed", max_batch=4)
    pool3 = torch.from_numpy(w.pool_np[0].copy())
    for bs in (4, 2, 4):
        st = w.step(bs)
        fb = Batch(VERIFY, st, Spec(st.mask("packed")))
        be.init_forward_metadata(fb)
        q = st.q()
        for p in (pool3, pool3.view(-1, W)):
            fb.token_to_kv_pool = TokenPool([p])
            o = be.forward(q, None, None, Layer(0), fb, save_kv_cache=False)
            assert o.data_ptr() == be.out.data_ptr()
            st.check(o, q, w.pool_np[0], "bs %d pool %d-D" % (bs, p.dim()), seed)
        fb.token_to_kv_pool = TokenPool([pool3])
        o = be.forward(q.double(), None, None, Layer(0), fb, save_kv_cache=False)
        st.check(o, q, w.pool_np[0], "q copied in", seed)
        for bad, words in ((pool3[:, :, :DL], "not contiguous"),
                           (pool3[:, :, :DL].contiguous(), "kv_cache has shape"),
                           (pool3.half(), "kv_cache has dtype float16")):
            fb.token_to_kv_pool = TokenPool([bad])
            with pytest.raises(mv.InvalidArgumentError, match=words):
                be.forward(q, None, None, Layer(0), fb, save_kv_cache=False)
    be.close()


# -- the silent wrong answers of issue 36 ------------------------------------------------------

def test_softmax_scale_checked_against_the_layer(seed):
    """A backend made with another scale than the layer's (YaRN's mscale forgotten) refuses
    the layer at its first forward instead of attending with the wrong scale."""
    w = world(seed, 2)
    be = backend(w)
    st = w.step(2)
    fb = Batch(VERIFY, st, None, pools(w))
    be.init_forward_metadata(fb)
    yarn = SCALE * (0.1 * np.log(40.0) + 1.0) ** 2
    with pytest.raises(mv.InvalidArgumentError, match="layer.scaling"):
        be.forward(st.q(), None, None, Layer(0, scaling=yarn), fb, save_kv_cache=False)
    be.forward(st.q(), None, None, Layer(1), fb, save_kv_cache=False)
    be.close()


def test_uint8_full_mask_is_the_bool_one(seed):
    """Triton's verify-mask buffer is uint8: a uint8 FULL_MASK gives what the bool one does."""
    w = world(seed, 5)
    be = backend(w, mask_mode="full")
    st = w.step(3)
    q = st.q()
    outs = []
    for dt in (torch.bool, torch.uint8):
        fb = Batch(VERIFY, st, Spec(st.mask("full", dt)), pools(w))
        be.init_forward_metadata(fb)
        outs.append(be.forward(q, None, None, Layer(0), fb, save_kv_cache=False).clone())
    assert torch.equal(outs[0], outs[1])
    st.check(outs[1], q, w.pool_np[0], "uint8 FULL_MASK", seed)
    be.close()


def test_eager_batch_larger_than_the_captured_ones(seed):
    """Graphs captured up to 2 requests, then an eager batch of 6: the buffers were made for
    the request pool's size, so it runs (and against the reference)."""
    w = world(seed, 3)
    be = backend(w, mask_mode="full")
    be.init_cuda_graph_state(2, 6)
    st = w.step(6)
    fb = Batch(VERIFY, st, Spec(st.mask("full")), pools(w))
    be.init_forward_metadata(fb)
    q = st.q()
    st.check(be.forward(q, None, None, Layer(0), fb, save_kv_cache=False), q, w.pool_np[0],
             "eager batch 6", seed)
    be.close()


def test_fp8_draft_rows_are_saved_divided_by_k_scale(seed):
    """An FP8 pool with k_scale 0.25: the step's own rows are written as e4m3(k / k_scale), as
    SGLang's Triton backend writes them, so prefix and draft rows read back alike."""
    w = world(seed, 4)
    k_scale = 0.25
    bufs = [torch.from_numpy(e4m3_bits(p / np.float32(k_scale))) for p in w.pool_np]
    be = backend(w, mask_mode="full", kv_dtype="fp8_e4m3")
    pool = Fp8TokenPool(bufs)
    for split in (False, True):
        st = w.step(3)
        fb = Batch(VERIFY, st, Spec(st.mask("full")), pool)
        be.init_forward_metadata(fb)
        q, k = st.q(), st.k()
        layer = Layer(0, k_scale=k_scale)
        if split:
            k3 = k.view(-1, 1, W)
            o = be.forward(q, k3[..., :DL].contiguous(), None, layer, fb,
                           k_rope=k3[..., DL:].contiguous())
        else:
            o = be.forward(q, k, k, layer, fb)
        written = bufs[0][st.out_cache_loc].float()
        want = torch.from_numpy(e4m3_to_f32(e4m3_bits(k.numpy() / np.float32(k_scale))))
        assert torch.equal(e4m3_to_f32_t(written), want.view(-1, 1, W)), "rows not divided"
        st.check(o, q, bufs[0].numpy(), "fp8 split=%s" % split, seed, kv_dtype="fp8_e4m3",
                 kv_scale=k_scale)
    be.close()


def e4m3_to_f32_t(b):
    return torch.from_numpy(e4m3_to_f32(b.to(torch.uint8).numpy()))


def test_dflash_mask_absent_at_replay(seed):
    """DFlash as SGLang's graph runner drives it: capture with an all-True flat bool mask,
    replay with custom_mask None. The graph reads one mask buffer, whatever was there at
    capture: replays are causal, for mask_mode 'full' (told the truth about the capture mask)
    and 'causal' alike."""
    w = world(seed, 6, layers=1)
    pool = pools(w)
    for mm in ("full", "causal"):
        be = backend(w, mask_mode=mm, max_batch=4)
        st = w.step(4)
        cap = Batch(VERIFY, st, Spec(torch.ones(4 * (1 + st.n) * st.n * 40, dtype=torch.bool)),
                    pool)
        be.init_forward_metadata_out_graph(cap, in_capture=True)
        qbuf = st.q()
        g = CpuGraph(be)
        with g.capture():
            out = be.forward(qbuf, None, None, Layer(0), cap, save_kv_cache=False)
        for it in range(5):
            real = int(w.rng.integers(1, 5))
            st = w.step(real, bs=4, kinds="chain")
            be.init_forward_metadata_out_graph(Batch(VERIFY, st, Spec(None), pool))
            q = st.q()
            qbuf.copy_(q)
            g.replay()
            st.check(out, q, w.pool_np[0], "%s replay %d" % (mm, it), seed, causal=True)
        be.close()


def test_graph_replay_reads_each_steps_metadata(seed):
    """Capture once, replay steps of changing lengths, rows and EAGLE FULL_MASK trees: every
    replay answers its own step (no metadata left from the capture)."""
    w = world(seed, 5, layers=2)
    pool = pools(w)
    be = backend(w, mask_mode="full", max_batch=4)
    st = w.step(4)
    cap = Batch(VERIFY, st, Spec(st.mask("full")), pool)
    be.init_forward_metadata_out_graph(cap, in_capture=True)
    qbufs = [st.q() for _ in range(w.layers)]
    g = CpuGraph(be)
    outs = []
    with g.capture():
        for li in range(w.layers):
            o = be.forward(qbufs[li], None, None, Layer(li), cap, save_kv_cache=False)
            outs.append(o.clone() if li < w.layers - 1 else o)
    assert len(g.runs) == w.layers
    for it in range(8):
        st = w.step(int(w.rng.integers(1, 5)), bs=4)
        be.init_forward_metadata_out_graph(Batch(VERIFY, st, Spec(st.mask("full")), pool))
        qs = [st.q() for _ in range(w.layers)]
        for li, t in enumerate(g.runs):
            qbufs[li].copy_(qs[li])
            be.plan._run_ref(__import__("ctypes").byref(t))
            st.check(be.out.view(st.T, -1), qs[li], w.pool_np[li], "replay %d layer %d"
                     % (it, li), seed)
    be.close()


def test_page_table_rows_match_the_copied_rows(seed):
    """page_table='rows' (B indices into req_to_token, no per-step copy) gives exactly what
    the copied page table gives."""
    if not __import__("mlaverify.sglang_backend").sglang_backend.library_reads_page_table_rows():
        pytest.skip("this libmlaverify does not read mlav_tensors.page_table_rows")
    w = world(seed, 4)
    pool = pools(w)
    rows, copy = backend(w, mask_mode="full", page_table="rows"), \
        backend(w, mask_mode="full", page_table="copy")
    for it in range(4):
        st = w.step(int(w.rng.integers(1, 8)))
        q = st.q()
        got = []
        for be in (rows, copy):
            fb = Batch(VERIFY, st, Spec(st.mask("full")), pool)
            be.init_forward_metadata(fb)
            got.append(be.forward(q, None, None, Layer(0), fb, save_kv_cache=False).clone())
        assert rows._rows and not copy._rows
        assert torch.equal(got[0], got[1]), it
        st.check(got[0], q, w.pool_np[0], "rows step %d" % it, seed)
    rows.close()
    copy.close()


def _cuda_ready():
    return (torch.cuda.is_available() and mv.backend_compiled("cuda")
            and mv.cuda_device_count() > 0)


@pytest.mark.skipif(not _cuda_ready(), reason="needs torch with CUDA, a CUDA build and a device")
@pytest.mark.parametrize("algo", ["EAGLE", "DFLASH"])
def test_cuda_graph_replays(seed, algo):
    """A real CUDA graph of two layers (k saved inside it), captured after
    init_forward_metadata_out_graph(in_capture=True) and replayed 100 times with the metadata of
    each step written before: EAGLE FULL_MASK trees, or DFlash blocks (an all-True mask at
    capture, none at replay) — each step against the reference. (test_sglang_conformance.py
    does the same through SGLang's own files, FP8 pools included.)"""
    dev = torch.device("cuda", torch.cuda.current_device())
    rng = np.random.default_rng(seed)
    Hc, Dl, Dr, n, layers_, max_bs = 8, 512, 64, 8, 2, 4
    Wc = Dl + Dr
    w = World(rng, torch, H=Hc, DL=Dl, DR=Dr, n=n, reqs=9, ctx_len=256, pool_rows=2500,
              layers=layers_, dtype=torch.bfloat16, device=dev, scale=SCALE)
    bufs = [torch.from_numpy(p).to(torch.bfloat16).to(dev) for p in w.pool_np]

    class Pool(TokenPool):
        def set_kv_buffer(self, layer, loc_info, cache_k, cache_v):
            self.kv_buffer[layer.layer_id][loc_info] = cache_k.reshape(-1, 1, Wc).to(
                torch.bfloat16)

    pool = Pool(bufs)
    be = MlaVerifyAttnBackend(Hc, SCALE, n, w.req_to_token, d_latent=Dl, d_rope=Dr,
                              dtype="bf16", token_to_kv_pool=pool,
                              mask_mode="full" if algo == "EAGLE" else "causal")
    be.init_cuda_graph_state(max_bs, max_bs * n)
    T = max_bs * n
    st = w.step(max_bs)
    loc = torch.zeros(T, dtype=torch.int64, device=dev)
    cap_mask = torch.ones((max_bs + T) * n, dtype=torch.bool, device=dev)
    cap = Batch(VERIFY, st, Spec(cap_mask))
    cap.out_cache_loc = loc
    qb = [torch.zeros((T, Hc * Wc), dtype=torch.bfloat16, device=dev) for _ in range(layers_)]
    kb = [torch.zeros((T, 1, Wc), dtype=torch.bfloat16, device=dev) for _ in range(layers_)]
    lyr = [Layer(i, heads=Hc) for i in range(layers_)]
    for layer in lyr:
        layer.head_dim = Wc
    outs = [None] * layers_

    def body():
        for li in range(layers_):
            o = be.forward(qb[li], kb[li], kb[li], lyr[li], cap)
            outs[li] = o.clone() if li < layers_ - 1 else o

    be.init_forward_metadata_out_graph(cap, in_capture=True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    for it in range(100):
        st = w.step(int(rng.integers(1, max_bs + 1)))
        fb = Batch(VERIFY, st, Spec(st.mask("full") if algo == "EAGLE" else None))
        # the graph runner's padded buffers
        rpi = torch.zeros(max_bs, dtype=torch.int64, device=dev)
        seq = torch.ones(max_bs, dtype=torch.int64, device=dev)
        rpi[:st.real] = st.req_pool_indices
        seq[:st.real] = st.seq_lens
        fb.batch_size, fb.req_pool_indices, fb.seq_lens = max_bs, rpi, seq
        be.init_forward_metadata_out_graph(fb)
        loc.zero_()
        loc[:st.real * n].copy_(st.out_cache_loc)
        qs = []
        for li in range(layers_):
            q = torch.nn.functional.pad(st.q(torch.bfloat16), (0, 0, 0, T - st.T))
            qb[li].copy_(q)
            kb[li].zero_()
            kb[li][:st.real * n] = st.k(torch.bfloat16)
            qs.append(q)
        g.replay()
        torch.cuda.synchronize()
        be.plan.step_status()
        for li in range(layers_):
            assert torch.equal(bufs[li][st.out_cache_loc], kb[li][:st.real * n])
            st.check(outs[li], qs[li], bufs[li].float().cpu().numpy(),
                     "%s replay %d layer %d" % (algo, it, li), seed, tol=5e-3,
                     causal=algo == "DFLASH")
    del g
    be.close()
