"""mlaverify's SGLang backend driven through SGLang's own files ($SGLANG_SRC: the pinned subset
in ../shared/sglang; CI sets it, the tests skip without it). Stubbed: only modules outside that
subset and GPU-only packages (tests/sglang_real.py). Real: the plugin loader and attention
registry, the backend builder (attention_backend_setup), HybridAttnBackend and its mode routing,
ForwardMode / ForwardBatch, the forward context, RadixAttention.forward, the MLA token pool's
write path, ReqToTokenPool, EAGLE's and DFlash's verify inputs, and the decode graph runner's
replay view. Every output is compared with the reference backend.

The CUDA test at the end repeats the flows with real torch CUDA graphs (capture through
init_forward_metadata_out_graph(in_capture=True), 120 replays of changing lengths for EAGLE trees
and DFlash blocks, BF16 and FP8 pools with k_scale != 1); it skips without a GPU."""
import ctypes
import importlib
import inspect
import os
from importlib.metadata import EntryPoint
from types import SimpleNamespace

import numpy as np
import pytest

import mlaverify as mv
from sglang_cases import CpuGraph, World
from sglang_real import OVERRIDES, _Parallel, sglang_modules, source_root

torch = pytest.importorskip("torch")

if source_root() is None:
    pytest.skip("SGLANG_SRC is not set: point it at a copy of SGLang's files (CI: "
                "../shared/sglang) to run the conformance tests", allow_module_level=True)

H, DL, DR, NOPE = 4, 64, 16, 128
W = DL + DR
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def sg():
    """SGLang's modules, and mlaverify's backend and plugin modules reloaded beside them (the
    backend class then subclasses SGLang's AttentionBackend)."""
    import mlaverify.sglang_backend as sb
    import mlaverify.sglang_plugin as sp
    with sglang_modules() as s:
        importlib.reload(sb)
        importlib.reload(sp)
        s.backend_mod, s.plugin_mod = sb, sp
        s.fbi = s.module("sglang.srt.model_executor.forward_batch_info")
        s.ForwardMode = s.fbi.ForwardMode
        s.base = s.module("sglang.srt.layers.attention.base_attn_backend")
        s.hybrid = s.module("sglang.srt.layers.attention.hybrid_attn_backend")
        s.ctx = s.module("sglang.srt.model_executor.forward_context")
        s.radix = s.module("sglang.srt.layers.radix_attention")
        s.mp = s.module("sglang.srt.mem_cache.memory_pool")
        s.registry = s.module("sglang.srt.layers.attention.attention_registry")
        s.setup = s.module("sglang.srt.model_executor.model_runner_components."
                           "attention_backend_setup")
        s.plugins = s.module("sglang.srt.plugins")
        s.server_args = s.module("sglang.srt.server_args")
        s.eagle = s.module("sglang.srt.speculative.eagle_info")
        s.dflash = s.module("sglang.srt.speculative.dflash_info")
        s.dflash_utils = s.module("sglang.srt.speculative.dflash_utils")
        s.graph = s.module("sglang.srt.model_executor.runner.decode_cuda_graph_runner")
        s.ds_utils = s.module("sglang.srt.models.deepseek_common.utils")
        yield s
    importlib.reload(sb)
    importlib.reload(sp)


# -- SGLang-shaped objects built from SGLang's classes --------------------------------------------

def yarn_scale(sg):
    """DeepSeek's MLA scale under YaRN (factor 40, mscale_all_dim 1), from SGLang's own
    yarn_get_mscale: what deepseek_v2.py gives RadixAttention as `scaling`."""
    m = sg.ds_utils.yarn_get_mscale(40.0, 1.0)
    return (NOPE + DR) ** -0.5 * m * m


class CpuPrefill:
    """The prefill side of the hybrid (fa3 / flashinfer on a GPU): records what reaches it."""


def make_prefill_class(sg):
    class Prefill(sg.base.AttentionBackend):
        needs_cpu_seq_lens = False

        def __init__(self, runner):
            self.calls = []

        def init_cuda_graph_state(self, max_bs, max_num_tokens):
            self.calls.append("init_cuda_graph_state")

        def init_forward_metadata_out_graph(self, fb, in_capture=False):
            self.calls.append(("metadata", fb.forward_mode))

        def forward_extend(self, q, k, v, layer, fb, save_kv_cache=True, **kw):
            self.calls.append(("extend", fb.forward_mode))
            return q.new_zeros((q.shape[0], layer.tp_q_head_num * layer.v_head_dim))
    return Prefill


def mla_pool(sg, bufs, dtype):
    """SGLang's MLATokenToKVPool on given buffers (its __init__ allocates on a device; the
    methods the backend meets are the real ones)."""
    p = object.__new__(sg.mp.MLATokenToKVPool)
    p.size, p.page_size, p.dtype = bufs[0].shape[0] - 1, 1, dtype
    p.store_dtype = torch.uint8 if bufs[0].dtype == torch.uint8 else dtype
    p.kv_lora_rank, p.qk_rope_head_dim, p.kv_cache_dim = DL, DR, W
    p.start_layer, p.end_layer, p.layer_num = 0, len(bufs) - 1, len(bufs)
    p.layer_transfer_counter = None
    p.use_dsa, p.dsa_kv_cache_store_fp8 = False, False
    p.kv_buffer = bufs
    return p


def make_runner(sg, w, *, algo, bufs, dtype=torch.float32, kv_cache_dtype=None, tp=1,
                device="cpu"):
    """A ModelRunner-shaped object: the fields SGLang's backends and HybridAttnBackend read."""
    pool = sg.mp.ReqToTokenPool(size=w.reqs - 1, max_context_len=w.ctx_len, device=device,
                                enable_memory_saver=False)
    pool.req_to_token.copy_(w.req_to_token)
    w.req_to_token = pool.req_to_token
    hf = SimpleNamespace(qk_nope_head_dim=NOPE, qk_rope_head_dim=DR, kv_lora_rank=DL,
                         num_attention_heads=H * tp,
                         rope_scaling={"type": "yarn", "factor": 40.0, "mscale": 1.0,
                                       "mscale_all_dim": 1.0})
    mc = SimpleNamespace(num_attention_heads=H * tp, kv_lora_rank=DL, qk_rope_head_dim=DR,
                         context_len=w.ctx_len, hf_config=hf, is_encoder_decoder=False)
    sa = SimpleNamespace(speculative_algorithm=algo, speculative_num_draft_tokens=w.n,
                         speculative_attention_mode="decode", page_size=1,
                         attention_backend=None, prefill_attention_backend="cpu_prefill",
                         decode_attention_backend="mlaverify")
    return SimpleNamespace(model_config=mc, server_args=sa, req_to_token_pool=pool,
                           token_to_kv_pool=mla_pool(sg, bufs, kv_cache_dtype or dtype),
                           kv_cache_dtype=kv_cache_dtype or dtype, dtype=dtype, device=device,
                           gpu_id=0, use_mla_backend=True, page_size=1, is_draft_worker=False)


def build_hybrid(sg, runner):
    """What ModelRunner.init_attention_backend does for --prefill-attention-backend cpu_prefill
    --decode-attention-backend mlaverify: SGLang's own builder."""
    sg.registry.register_attention_backend("cpu_prefill")(make_prefill_class(sg))
    resolved = sg.setup.ResolvedAttentionBackendStr(prefill="cpu_prefill", decode="mlaverify")
    return sg.setup._build_resolved_backend(model_runner=runner, resolved=resolved,
                                            init_new_workspace=False)


def layers(sg, n_layers, scale):
    return [sg.radix.RadixAttention(H, W, scale, num_kv_heads=1, layer_id=i, v_head_dim=DL)
            for i in range(n_layers)]


def forward_batch(sg, mode, step, spec_info):
    fb = sg.fbi.ForwardBatch(forward_mode=mode, batch_size=step.bs,
                             input_ids=torch.zeros(step.T, dtype=torch.int64),
                             req_pool_indices=step.req_pool_indices, seq_lens=step.seq_lens,
                             out_cache_loc=step.out_cache_loc,
                             seq_lens_sum=int(step.seq_lens.sum()), spec_info=spec_info)
    return fb


def eagle_input(sg, mask, n):
    return sg.eagle.EagleVerifyInput(
        draft_token=None, custom_mask=mask, positions=None, retrieve_index=None,
        retrieve_next_token=None, retrieve_next_sibling=None, retrieve_cum_len=None,
        spec_steps=3, topk=4, draft_token_num=n,
        capture_hidden_mode=sg.fbi.CaptureHiddenMode.FULL, seq_lens_sum=None, seq_lens_cpu=None)


def dflash_input(sg, mask, n):
    return sg.dflash.DFlashVerifyInput(draft_token=None, positions=None, draft_token_num=n,
                                       custom_mask=mask)


def replay_view(sg, step, fb, max_bs, mode, fill):
    """The decode graph runner's replay view of a step padded to max_bs (its buffers as
    fill_from leaves them: request row 0 and seq_lens `fill` past the real requests)."""
    rpi = torch.zeros(max_bs, dtype=torch.int64, device=step.req_pool_indices.device)
    seq = torch.full((max_bs,), fill, dtype=torch.int64, device=step.seq_lens.device)
    rpi[:step.real] = step.req_pool_indices[:step.real]
    seq[:step.real] = step.seq_lens[:step.real]
    T = max_bs * step.n
    buffers = SimpleNamespace(input_ids=torch.zeros(T, dtype=torch.int64),
                              positions=torch.zeros(T, dtype=torch.int64),
                              req_pool_indices=rpi, seq_lens=seq, seq_lens_cpu=seq.cpu(),
                              encoder_lens=None)
    return sg.graph.build_replay_fb_view(
        forward_batch=fb, buffers=buffers, bs=max_bs, raw_bs=step.real, num_tokens=T,
        seq_len_fill_value=fill, capture_forward_mode=mode, is_encoder_decoder=False)


def world(seed, n, **kw):
    rng = np.random.default_rng(seed)
    return World(rng, torch, H=H, DL=DL, DR=DR, n=n, reqs=kw.pop("reqs", 9),
                 ctx_len=kw.pop("ctx_len", 48), pool_rows=kw.pop("pool_rows", 600),
                 layers=kw.pop("layers", 2), **kw)


# -- the stand-ins of test_sglang_backend.py against SGLang's classes -----------------------------

def test_stand_ins_have_sglangs_interface(sg):
    """What test_sglang_backend.py fakes (pool, layer, forward mode) has SGLang's names and
    signatures, so the duck-typed tests cannot drift from SGLang unnoticed."""
    import test_sglang_backend as t
    for name in ("get_key_buffer", "set_kv_buffer", "set_mla_kv_buffer"):
        real = inspect.signature(getattr(sg.mp.MLATokenToKVPool, name))
        fake = inspect.signature(getattr(t.TokenPool, name))
        assert list(real.parameters) == list(fake.parameters), name
    layer = sg.radix.RadixAttention(H, W, 0.1, num_kv_heads=1, layer_id=0, v_head_dim=DL)
    fake = t.Layer(0)
    for a in vars(fake):
        assert hasattr(layer, a), a
    for m in ("is_target_verify", "is_decode", "is_idle", "is_decode_or_idle"):
        assert callable(getattr(sg.ForwardMode.TARGET_VERIFY, m)), m
    for f in ("batch_size", "req_pool_indices", "seq_lens", "out_cache_loc", "spec_info",
              "forward_mode"):
        assert f in sg.fbi.ForwardBatch.__dataclass_fields__, f
    # the base class's abstract surface: every hook SGLang calls exists on the backend
    cls = sg.backend_mod.MlaVerifyAttnBackend
    assert issubclass(cls, sg.base.AttentionBackend)
    for hook in ("init_forward_metadata", "init_forward_metadata_out_graph",
                 "init_forward_metadata_in_graph", "init_cuda_graph_state",
                 "get_cuda_graph_seq_len_fill_value", "get_verify_buffers_to_fill_after_draft",
                 "forward", "forward_decode", "forward_extend"):
        assert getattr(cls, hook) is not getattr(sg.base.AttentionBackend, hook, None) or \
            hook == "get_verify_buffers_to_fill_after_draft", hook
    assert cls.needs_cpu_seq_lens is False


# -- registration ---------------------------------------------------------------------------------

def test_entry_point_registers_the_backend_and_its_flag(sg, monkeypatch):
    """The wheel's entry point in SGLang's group (entry_points.txt, as build_wheel.py writes it
    into every wheel), run by SGLang's plugin loader, registers the name with the attention
    registry and the --*-attention-backend choices."""
    import configparser
    import importlib.util
    spec = importlib.util.spec_from_file_location("build_wheel",
                                                  os.path.join(ROOT, "build_wheel.py"))
    bw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bw)
    ini = configparser.ConfigParser()
    ini.read_string(bw.entry_points())
    eps = dict(ini[sg.plugins.GENERAL_PLUGINS_GROUP])
    assert eps == {"mlaverify": "mlaverify.sglang_plugin:register"}
    ep = EntryPoint(name="mlaverify", value=eps["mlaverify"],
                    group=sg.plugins.GENERAL_PLUGINS_GROUP)
    monkeypatch.setattr(sg.plugins, "entry_points",
                        lambda group: [ep] if group == sg.plugins.GENERAL_PLUGINS_GROUP else [])
    assert "mlaverify" not in sg.registry.ATTENTION_BACKENDS
    sg.plugins.load_plugins()
    assert sg.registry.ATTENTION_BACKENDS["mlaverify"] is sg.plugin_mod.factory
    assert "mlaverify" in sg.server_args.ATTENTION_BACKEND_CHOICES
    sg.plugin_mod.register()  # idempotent
    assert sg.server_args.ATTENTION_BACKEND_CHOICES.count("mlaverify") == 1


def test_factory_derives_everything_from_the_runner(sg, seed, monkeypatch):
    """factory(model_runner) through SGLang's builder: heads per attention-TP rank, YaRN's
    scale, draft tokens, the request pool's size, pools, the mask mode per algorithm; the
    HybridAttnBackend around it constructs and routes TARGET_VERIFY / DECODE / IDLE here and
    EXTEND to the prefill backend."""
    sg.plugin_mod.register()
    monkeypatch.setattr(_Parallel, "attn_tp_size", 2)
    w = world(seed, 6)
    bufs = [torch.from_numpy(p.copy()) for p in w.pool_np]
    for algo, mode in (("EAGLE", "full"), ("EAGLE3", "full"), ("DFLASH", "causal"),
                       (None, "causal")):
        runner = make_runner(sg, w, algo=algo, bufs=bufs, tp=2)
        hybrid = build_hybrid(sg, runner)
        assert isinstance(hybrid, sg.hybrid.HybridAttnBackend)
        be = hybrid.decode_backend
        assert isinstance(be, sg.backend_mod.MlaVerifyAttnBackend)
        assert be.num_heads == H and be.mask_mode == mode
        assert be.n == (w.n if algo else 1)
        assert abs(be.softmax_scale - yarn_scale(sg)) <= 1e-12
        assert be.max_batch == runner.req_to_token_pool.size
        assert be.token_to_kv_pool is runner.token_to_kv_pool
        hybrid.init_cuda_graph_state(2, 2 * be.n)
        # req_to_token read in place through page_table_rows where the library reads them
        assert be._rows == sg.backend_mod.library_reads_page_table_rows()
        assert not be._rows or be.page_table is runner.req_to_token_pool.req_to_token
        assert hybrid.needs_cpu_seq_lens is False
        # what EAGLE's draft reads from the model runner's backend (eagle_worker_common)
        assert hybrid.max_context_len == be.max_context_len == w.ctx_len
        M = sg.ForwardMode
        for m, side in ((M.TARGET_VERIFY, be), (M.DECODE, be), (M.IDLE, be),
                        (M.EXTEND, hybrid.prefill_backend)):
            assert hybrid._select_backend(m) is side, m
    # DFlash's premise: SGLang builds a capture mask for this backend (it is not on the list
    # of backends that verify DFlash causally by themselves)
    assert sg.dflash_utils.resolve_dflash_verify_mask_policy(hybrid)[1] is True
    with pytest.raises(mv.InvalidArgumentError, match="page-size 1"):
        r = make_runner(sg, w, algo="EAGLE", bufs=bufs)
        r.page_size = 16
        sg.plugin_mod.factory(r)


# -- the flows --------------------------------------------------------------------------------------

def _setup(sg, seed, algo, n, n_layers=2):
    sg.plugin_mod.register()
    w = world(seed, n, layers=n_layers)
    bufs = [torch.from_numpy(p.copy()) for p in w.pool_np]
    runner = make_runner(sg, w, algo=algo, bufs=bufs)
    hybrid = build_hybrid(sg, runner)
    w.scale = yarn_scale(sg)
    return w, bufs, runner, hybrid, layers(sg, n_layers, w.scale)


def _attn(sg, hybrid, layer, q, k, fb, split):
    """One layer as deepseek_v2's MLA forward calls it: concatenated q / k, or q_nope, q_rope,
    k_nope, k_rope apart; through RadixAttention.forward and the forward context."""
    T = q.shape[0]
    with sg.ctx.forward_context(sg.ctx.ForwardContext(attn_backend=hybrid)):
        if k is None:
            return layer(q, None, None, fb, save_kv_cache=False)
        if not split:
            return layer(q, k.reshape(-1, W), k[..., :DL].reshape(-1, DL), fb)
        q3 = q.view(T, H, W)
        return layer(q3[..., :DL].contiguous(), k[..., :DL].reshape(-1, DL).contiguous(),
                     k[..., :DL].reshape(-1, DL).contiguous(), fb,
                     q_rope=q3[..., DL:].contiguous(), k_rope=k[..., DL:].contiguous())


def test_eagle_verify_eager_through_sglang(sg, seed):
    """Eager EAGLE steps: SGLang's ForwardBatch (TARGET_VERIFY), EagleVerifyInput with a
    FULL_MASK, the hybrid's metadata routing, RadixAttention.forward, the MLA pool's write path
    (k saved at out_cache_loc first), both forms of q and k: each layer against the reference."""
    w, bufs, runner, hybrid, lyr = _setup(sg, seed, "EAGLE", 6)
    M = sg.ForwardMode
    for it in range(6):
        st = w.step(int(w.rng.integers(1, 6)))
        fb = forward_batch(sg, M.TARGET_VERIFY, st, eagle_input(sg, st.mask("full"), w.n))
        hybrid.init_forward_metadata(fb)
        for li, layer in enumerate(lyr):
            q, k = st.q(), st.k()
            o = _attn(sg, hybrid, layer, q, k, fb, split=bool((it + li) % 2))
            assert torch.equal(bufs[li][st.out_cache_loc], k.view(-1, 1, W)), "k not saved"
            st.check(o, q, bufs[li].numpy(), "eager step %d layer %d" % (it, li), seed)


def test_decode_and_idle_through_sglang(sg, seed):
    w, bufs, runner, hybrid, lyr = _setup(sg, seed, None, 1, n_layers=1)
    M = sg.ForwardMode
    for it in range(4):
        st = w.step(int(w.rng.integers(1, 8)), decode=True)
        fb = forward_batch(sg, M.DECODE, st, None)
        hybrid.init_forward_metadata(fb)
        q, k = st.q(), st.k()
        o = _attn(sg, hybrid, lyr[0], q, k, fb, split=True)
        st.check(o, q, bufs[0].numpy(), "decode step %d" % it, seed)
    st = w.step(1)
    idle = forward_batch(sg, M.IDLE, st, None)
    idle.batch_size = 0
    hybrid.init_forward_metadata(idle)
    e = _attn(sg, hybrid, lyr[0], torch.zeros((0, H * W)), None, idle, split=False)
    assert e.shape == (0, H * DL)


@pytest.mark.parametrize("algo", ["EAGLE", "DFLASH", "DFLASH mask_mode=full"])
def test_graph_replays_through_sglang(sg, seed, algo):
    """The decode graph runner's protocol, with a CPU stand-in for the CUDA graph (the runs'
    pointers as captured): metadata out of graph with in_capture=True, capture, then per step
    build_replay_fb_view (padded) -> init_forward_metadata_out_graph -> replay. EAGLE replays
    FULL_MASK trees; DFlash captures SGLang's all-True mask buffer and replays with
    custom_mask None, which must read as causal (also when the backend is told to read masks as
    FULL_MASK: the capture's mask is then all-True, the replays' causal)."""
    n = 6 if algo == "EAGLE" else 8
    w, bufs, runner, hybrid, lyr = _setup(sg, seed, algo.split()[0], n)
    M = sg.ForwardMode
    be = hybrid.decode_backend
    if algo.endswith("full"):
        be.mask_mode = "full"
    algo = algo.split()[0]
    # the largest graph (the stand-in replays mlav_run alone, so q is read in place: a graph
    # of the backend's max_batch; smaller graphs also copy q, see the CUDA test)
    max_bs = be.max_batch
    hybrid.init_cuda_graph_state(max_bs, max_bs * n)
    fill = hybrid.get_cuda_graph_seq_len_fill_value()
    st = w.step(max_bs)
    cap_mask = torch.ones((max_bs * fill + max_bs * n) * n, dtype=torch.bool)  # base_runner's
    spec = eagle_input(sg, cap_mask, n) if algo == "EAGLE" else dflash_input(sg, cap_mask, n)
    cap = forward_batch(sg, M.TARGET_VERIFY, st, spec)
    hybrid.init_forward_metadata_out_graph(cap, in_capture=True)
    qbufs = [st.q() for _ in lyr]
    g = CpuGraph(be)
    with g.capture():
        hybrid.init_forward_metadata_in_graph(cap)
        for li, layer in enumerate(lyr):
            _attn(sg, hybrid, layer, qbufs[li], None, cap, split=False)
    assert len(g.runs) == len(lyr)
    for it in range(10):
        st = w.step(int(w.rng.integers(1, max_bs + 1)), kinds="random")
        if algo == "EAGLE":
            spec = eagle_input(sg, st.mask("full"), n)
        else:
            spec = dflash_input(sg, None, n)
        fb = forward_batch(sg, M.TARGET_VERIFY, st, spec)
        view = replay_view(sg, st, fb, max_bs, M.TARGET_VERIFY, fill)
        hybrid.init_forward_metadata_out_graph(view)
        # the runner's input buffers hold the step's q, zero past its tokens
        qs = [torch.nn.functional.pad(st.q(), (0, 0, 0, max_bs * n - st.T)) for _ in lyr]
        for li, t in enumerate(g.runs):
            qbufs[li].copy_(qs[li])
            be.plan._run_ref(ctypes.byref(t))
            st.check(be.out.reshape(max_bs * n, -1), qs[li], bufs[li].numpy(),
                     "%s replay %d layer %d" % (algo, it, li), seed, causal=algo == "DFLASH")


# -- CUDA: real graphs -----------------------------------------------------------------------------

def _cuda_ready():
    return (torch.cuda.is_available() and mv.backend_compiled("cuda")
            and mv.cuda_device_count() > 0 and hasattr(torch, "float8_e4m3fn"))


@pytest.mark.skipif(not _cuda_ready(), reason="needs torch with CUDA (and float8), a CUDA "
                    "build of libmlaverify and a device")
@pytest.mark.parametrize("algo", ["EAGLE", "DFLASH"])
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_cuda_graphs_through_sglang(sg, seed, algo, kv):
    """Real torch CUDA graphs: capture through init_forward_metadata_out_graph(in_capture=True)
    (the k save, its division by k_scale 0.37 for FP8, and every layer inside the graph), then 120
    replays of changing batches, prefixes and trees (EAGLE) or blocks (DFlash, custom_mask None
    at replay), each layer against the reference on the pool as the graph left it."""
    dev = torch.device("cuda", torch.cuda.current_device())
    Hc, Dl, Dr, n_layers, max_bs = 8, 512, 64, 2, 4
    n = 8
    rng = np.random.default_rng(seed)
    global H, DL, DR, W
    saved = (H, DL, DR, W)
    H, DL, DR, W = Hc, Dl, Dr, Dl + Dr
    try:
        w = World(rng, torch, H=Hc, DL=Dl, DR=Dr, n=n, reqs=9, ctx_len=320, pool_rows=3000,
                  layers=n_layers, dtype=torch.bfloat16, device=dev)
        k_scale = 0.37 if kv == "fp8" else None
        if kv == "fp8":
            from mlaverify.bundle import e4m3_bits
            bufs = [torch.from_numpy(e4m3_bits(p / np.float32(k_scale))).to(dev)
                    for p in w.pool_np]
            kv_dtype = torch.float8_e4m3fn
        else:
            bufs = [torch.from_numpy(p).to(torch.bfloat16).to(dev) for p in w.pool_np]
            kv_dtype = None
        sg.plugin_mod.register()
        runner = make_runner(sg, w, algo=algo, bufs=bufs, dtype=torch.bfloat16,
                             kv_cache_dtype=kv_dtype, device=dev)
        hybrid = build_hybrid(sg, runner)
        w.scale = yarn_scale(sg)
        lyr = [sg.radix.RadixAttention(Hc, W, w.scale, num_kv_heads=1, layer_id=i,
                                       v_head_dim=Dl) for i in range(n_layers)]
        for layer in lyr:
            if k_scale is not None:
                layer.k_scale = torch.tensor([k_scale], dtype=torch.float32, device=dev)
                layer.k_scale_float = k_scale
        M = sg.ForwardMode
        hybrid.init_cuda_graph_state(max_bs, max_bs * n)
        be = hybrid.decode_backend
        fill = hybrid.get_cuda_graph_seq_len_fill_value()
        T = max_bs * n
        st = w.step(max_bs)
        cap_mask = torch.ones((max_bs * fill + T) * n, dtype=torch.bool, device=dev)
        spec = eagle_input(sg, cap_mask, n) if algo == "EAGLE" else \
            dflash_input(sg, cap_mask, n)
        cap = forward_batch(sg, M.TARGET_VERIFY, st, spec)
        cap.input_ids = cap.input_ids.to(dev)
        loc = torch.zeros(T, dtype=torch.int64, device=dev)   # the runner's out_cache_loc
        cap.out_cache_loc = loc
        qbufs = [torch.zeros((T, Hc * W), dtype=torch.bfloat16, device=dev) for _ in lyr]
        kbufs = [torch.zeros((T, 1, W), dtype=torch.bfloat16, device=dev) for _ in lyr]
        outs = [None] * n_layers

        def body():
            hybrid.init_forward_metadata_in_graph(cap)
            for li, layer in enumerate(lyr):
                o = _attn(sg, hybrid, layer, qbufs[li], kbufs[li], cap, split=bool(li % 2))
                outs[li] = o if li == n_layers - 1 else o.clone()

        hybrid.init_forward_metadata_out_graph(cap, in_capture=True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        for it in range(int(os.environ.get("MLAV_SGLANG_GRAPH_STEPS", "120"))):
            st = w.step(int(rng.integers(1, max_bs + 1)),
                        kinds=["random", "bushy", "chain"][it % 3])
            spec = eagle_input(sg, st.mask("full"), n) if algo == "EAGLE" else \
                dflash_input(sg, None, n)
            fb = forward_batch(sg, M.TARGET_VERIFY, st, spec)
            loc.zero_()
            loc[:st.real * n].copy_(st.out_cache_loc)
            fb.out_cache_loc = loc
            view = replay_view(sg, st, fb, max_bs, M.TARGET_VERIFY, fill)
            hybrid.init_forward_metadata_out_graph(view)
            qs, ks = [], []
            for li in range(n_layers):
                q = st.q(torch.bfloat16)
                q = torch.nn.functional.pad(q, (0, 0, 0, T - q.shape[0]))
                k = torch.zeros((T, 1, W), dtype=torch.bfloat16, device=dev)
                k[:st.real * n] = st.k(torch.bfloat16)
                qbufs[li].copy_(q)
                kbufs[li].copy_(k)
                qs.append(q)
                ks.append(k)
            g.replay()
            torch.cuda.synchronize()
            be.plan.step_status()
            for li in range(n_layers):
                real_loc = st.out_cache_loc
                if kv == "fp8":
                    # SGLang's Triton backend: k.clone().div_(layer.k_scale) in k's dtype,
                    # then the pool's cast to e4m3 (round to nearest even, both)
                    scaled = ks[li][:st.real * n].clone().div_(lyr[li].k_scale)
                    want_rows = torch.from_numpy(e4m3_bits(scaled.float().cpu().numpy()))
                    assert torch.equal(bufs[li][real_loc].cpu(), want_rows), \
                        "FP8 draft rows not saved as e4m3(k / k_scale) (seed %d)" % seed
                    pool = bufs[li].cpu().numpy()
                    kw = dict(kv_dtype="fp8_e4m3", kv_scale=k_scale)
                else:
                    assert torch.equal(bufs[li][real_loc], ks[li][:st.real * n])
                    pool = bufs[li].float().cpu().numpy()
                    kw = {}
                st.check(outs[li], qs[li], pool, "%s %s replay %d layer %d"
                         % (algo, kv, it, li), seed, tol=5e-3, causal=algo == "DFLASH", **kw)
        del g
        be.close()
    finally:
        H, DL, DR, W = saved
