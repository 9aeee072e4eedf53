"""An SGLang attention backend for MLA target verify (EAGLE trees, DFlash blocks) and decode.

Registered in SGLang as the attention backend ``mlaverify`` (mlaverify.sglang_plugin, through
SGLang's ``sglang.srt.plugins`` entry points); python/README.md has the launch recipe. When
SGLang is importable the class subclasses its ``AttentionBackend``; without SGLang it is
duck-typed (numpy and torch only), which the tests and other engines use.

SGLang's interface (base_attn_backend.py, since 2026-06-02):

    backend = factory(model_runner)                  # mlaverify.sglang_plugin: all from the runner
    backend.init_cuda_graph_state(max_bs, max_num_tokens)          # once: plan + fixed buffers
    backend.init_forward_metadata_out_graph(fb, in_capture=True)   # then capture the forward
    per step: backend.init_forward_metadata_out_graph(fb_view); graph.replay()
    eager:    backend.init_forward_metadata(fb); model forward
    every layer: backend.forward(q, k, v, layer, fb, save_kv_cache, q_rope=, k_rope=)

and the hooks of SGLang before 2026-06-02 (init_forward_metadata_capture_cuda_graph /
_replay_cuda_graph) do the same. Batches: TARGET_VERIFY (n draft tokens per request; SGLang's
seq_lens exclude them), DECODE (one token per request: a verify of one node; seq_lens include
it) and IDLE (nothing; forward returns an empty tensor). Extend and draft extend are refused
with a sentence naming the flags that send them to another backend (HybridAttnBackend).

Per step, once (not per layer), the metadata writes fixed buffers with torch ops on the current
stream and no host synchronization:
- which row of ``req_to_token`` each request reads: B int32 indices (``req_pool_indices``) when
  the library reads a shared page table through ``mlav_tensors.page_table_rows``; otherwise the
  rows themselves are gathered into a private [B, max_kv_len] page table;
- ``kv_lens`` (seq_lens + n in verify, seq_lens in decode), while ``q_indptr`` is fixed;
- in verify, the packed tree mask: from spec_info.custom_mask (FULL_MASK / QLEN_ONLY as bool
  or uint8, QLEN_ONLY_BITPACKING, the library's packed words) or, when the step has none or the
  mask mode is "causal", causal words. A captured graph therefore always reads the same mask
  buffer, whatever was present at capture (DFlash captures an all-True mask and replays with
  none);
then ``StepPlan.update`` with those device lengths. Each layer's forward saves k (divided by
the layer's k_scale for an FP8 pool, as SGLang's own backends save it) and runs the plan on a
per-layer mlav_tensors whose fixed pointers are set once: a few microseconds over a bare
mlav_run (``python -m mlaverify.overhead``).

On CPU tensors (tests, CI) the same code runs with a CPU StepPlan; its update then reads the
lengths on the host.
"""
import ctypes

import numpy as np

from . import _lib
from ._arrays import torch_module
from .api import MEM_DEVICE, MEM_HOST
from .errors import ERR_UNSUPPORTED, UnsupportedError, invalid
from .sglang_masks import TreeMaskBuffer
from .steps import StepPlan, int32_arg, set_kv_scale


def _sglang_base():
    """SGLang's AttentionBackend where SGLang imports, else object (duck typing)."""
    try:
        from sglang.srt.layers.attention.base_attn_backend import AttentionBackend
    except Exception:  # not installed, or an SGLang that does not import here
        return object
    return AttentionBackend


_Base = _sglang_base()

#: how SGLang's forward modes are served
VERIFY, DECODE, IDLE, OTHER = "target verify", "decode", "idle", "other"

_MASK_MODES = ("auto", "full", "qlen", "bitpacking", "packed", "causal")
_FLAGS = ("--prefill-attention-backend <fa3|flashinfer|triton> --decode-attention-backend "
          "mlaverify --speculative-attention-mode decode")


def _kind(forward_mode):
    """VERIFY, DECODE, IDLE or OTHER of an SGLang ForwardMode (or a duck-typed one)."""
    def has(name):
        f = getattr(forward_mode, name, None)
        return bool(f()) if callable(f) else False
    if has("is_idle"):
        return IDLE
    if has("is_target_verify"):
        return VERIFY
    if has("is_decode"):
        return DECODE
    return OTHER


_ROWS = {}


def library_reads_page_table_rows():
    """Whether the loaded libmlaverify reads mlav_tensors.page_table_rows (a library older than
    its binding would ignore the field: a silent wrong answer): one host run of two requests
    whose rows are swapped, made once per loaded library."""
    key = _lib.path()
    if key in _ROWS:
        return _ROWS[key]
    W = 8
    kv = np.zeros((2, 1, W), dtype=np.float32)
    kv[1, 0, :] = 1.0                      # page 1 holds ones, page 0 zeros
    pt = np.array([[0], [1]], dtype=np.int32)
    rows = np.array([1, 0], dtype=np.int32)
    q = np.ones((2, 1, W), dtype=np.float32)
    out = np.zeros((2, 1, 4), dtype=np.float32)
    lse = np.zeros((2, 1), dtype=np.float32)
    ok = False
    try:
        with StepPlan(1, 1.0, "f32", 1, 1, 2, 2, 1, 1, d_latent=4, d_rope=4,
                      backend="reference") as plan:
            plan.update(np.array([0, 1, 2], np.int32), np.array([1, 1], np.int32))
            t = _lib.MlavTensors(memory=MEM_HOST, q=q.ctypes.data, kv_cache=kv.ctypes.data,
                                 num_pages=2, page_table=pt.ctypes.data, out=out.ctypes.data,
                                 lse=lse.ctypes.data, page_table_rows=rows.ctypes.data,
                                 page_table_num_rows=2)
            plan._run_ref(ctypes.byref(t))
            ok = bool(out[0, 0, 0] == 1.0 and out[1, 0, 0] == 0.0)
    except Exception:  # a library that refuses the probe does not read the rows either
        ok = False
    _ROWS[key] = ok
    return ok


class MlaVerifyAttnBackend(_Base):
    """MLA target verify and decode through a mlaverify StepPlan (see the module doc).

    num_heads, softmax_scale      the layer's tp_q_head_num and scaling (YaRN's mscale in it;
                                  every layer's `scaling` is compared with it on first use)
    num_draft_tokens              n: draft tokens per request (1 without speculative decoding)
    req_to_token                  [rows, context_len] int32: req_to_token_pool.req_to_token
    max_batch                     the most requests in a step; default the request pool's rows
                                  (no eager batch can have more), raised to init_cuda_graph_state's
                                  max_bs when that comes first
    max_kv_len                    longest prefix + draft (default req_to_token.shape[1])
    d_latent, d_rope, dtype       512, 64, "bf16" (q and out)
    device                        where the buffers live (default req_to_token's device)
    mask_mode                     what spec_info.custom_mask is: "auto" (from its dtype and shape:
                                  bit-packed integers, the library's packed words, a 2-D bool
                                  QLEN_ONLY; a flat bool mask needs "full" or "qlen" said),
                                  "full" (FULL_MASK, bool or uint8: EAGLE), "qlen" (QLEN_ONLY),
                                  "bitpacking", "packed" or "causal" (ignored: DFlash)
    kv_dtype                      None (the pool has `dtype`) or "fp8_e4m3": an FP8 E4M3 pool
                                  (uint8 or torch.float8_e4m3fn); its scale is forward's
                                  kv_scale, else the layer's k_scale_float, else 1.0
    page_table                    "auto" (the shared req_to_token through page_table_rows when
                                  the library reads them, else "copy"), "rows" or "copy" (gather
                                  the rows into a private page table every step)
    token_to_kv_pool,             SGLang's pools (from the model runner); without a pool, forward
    req_to_token_pool             takes the forward context's (get_token_to_kv_pool()), then the
                                  forward batch's (SGLang before 2026-05-21)
    max_context_len               SGLang's model context length (default req_to_token's width)
    custom_op                     run every layer through torch.ops.mlaverify.verify_step (fresh
                                  outputs, one op for torch.compile; implies page_table="copy")
    model_runner                  optional: req_to_token, device, num_draft_tokens and the pools
                                  taken from it when not given (mlaverify.sglang_plugin.factory
                                  derives everything)

    The output of forward is a view of a buffer shared by all layers (unless custom_op): valid
    until the next layer's attention, as SGLang's o_proj consumes it at once.
    """

    needs_cpu_seq_lens = False
    supports_ragged_verify_graph = False
    prefill_attention_backend_str = None
    decode_attention_backend_str = None

    def __init__(self, num_heads, softmax_scale, num_draft_tokens=None, req_to_token=None, *,
                 max_batch=None, max_kv_len=None, d_latent=512, d_rope=64, dtype="bf16",
                 device=None, backend="auto", mask_mode="auto", custom_op=False,
                 model_runner=None, context=None, kv_dtype=None, page_table="auto",
                 token_to_kv_pool=None, req_to_token_pool=None, max_context_len=None):
        torch = torch_module()
        if torch is None:
            raise invalid("MlaVerifyAttnBackend needs torch (import torch first)")
        if model_runner is not None:
            if req_to_token_pool is None:
                req_to_token_pool = getattr(model_runner, "req_to_token_pool", None)
            if req_to_token is None and req_to_token_pool is not None:
                req_to_token = req_to_token_pool.req_to_token
            if num_draft_tokens is None:
                num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens or 1
            if device is None:
                device = getattr(model_runner, "device", None)
            if token_to_kv_pool is None:
                token_to_kv_pool = getattr(model_runner, "token_to_kv_pool", None)
        if req_to_token is None or num_draft_tokens is None:
            raise invalid("give req_to_token and num_draft_tokens (or a model_runner)")
        if mask_mode not in _MASK_MODES:
            raise invalid("mask_mode %r is not %s" % (mask_mode, ", ".join(_MASK_MODES)))
        if page_table not in ("auto", "rows", "copy"):
            raise invalid("page_table %r is not auto, rows or copy" % (page_table,))
        self.num_heads = int32_arg("num_heads", num_heads, 1)
        self.softmax_scale = float(softmax_scale)
        self.n = int32_arg("num_draft_tokens", num_draft_tokens, 1)
        self.req_to_token = req_to_token
        self.token_to_kv_pool = token_to_kv_pool
        self.req_to_token_pool = req_to_token_pool
        self.device = torch.device(device) if device is not None else req_to_token.device
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        cols = int(req_to_token.shape[1])
        self.max_kv_len = int32_arg("max_kv_len", cols if max_kv_len is None else max_kv_len,
                                    self.n, cols)
        self.max_context_len = int(max_context_len) if max_context_len is not None else cols
        self.d_latent, self.d_rope = int(d_latent), int(d_rope)
        self.dtype = dtype
        self.backend = backend
        self.context = context
        self.mask_mode = mask_mode
        self.custom_op = bool(custom_op)
        if self.custom_op:
            from .torch_ops import verify_step
            self._verify_step = verify_step
        self.page_table_mode = page_table
        rows = int(req_to_token.shape[0])
        if max_batch is None:
            pool_size = getattr(req_to_token_pool, "size", None)
            max_batch = int(pool_size) if pool_size is not None else rows
        self.max_batch = int32_arg("max_batch", max_batch, 1)
        self.kv_dtype = kv_dtype
        self.plan = None
        self.bs = None
        self._kind_of = {}      # forward mode object -> VERIFY / DECODE / IDLE / OTHER
        self._step = None       # the kind of the last metadata

    # -- the plan and its fixed buffers --------------------------------------------------------

    def _ensure(self):
        """The StepPlan and the fixed buffers (made once, for max_batch requests): a captured
        graph holds their pointers, so they are never remade."""
        if self.plan is not None:
            return
        torch = torch_module()
        B, n = self.max_batch, self.n
        T = B * n
        dev = self.device
        on_cuda = dev.type == "cuda"
        r2t = self.req_to_token
        i32 = torch.int32
        shared_ok = (r2t.dtype is i32 and r2t.device == dev and r2t.is_contiguous() and
                     not self.custom_op)
        if self.page_table_mode == "rows":
            if not shared_ok:
                raise invalid("page_table='rows' reads req_to_token in place: it must be a "
                              "contiguous int32 tensor on %s (and custom_op off), not %s on %s"
                              % (dev, r2t.dtype, r2t.device))
            if not library_reads_page_table_rows():
                raise UnsupportedError(ERR_UNSUPPORTED, "the loaded libmlaverify does not read "
                                       "mlav_tensors.page_table_rows: update it, or pass "
                                       "page_table='copy'")
            self._rows = True
        else:
            self._rows = (self.page_table_mode == "auto" and shared_ok and
                          library_reads_page_table_rows())
        max_pages = int(r2t.shape[1]) if self._rows else self.max_kv_len
        self.plan = StepPlan(self.num_heads, self.softmax_scale, self.dtype, 1, max_pages,
                             B, T, n, self.max_kv_len, d_latent=self.d_latent,
                             d_rope=self.d_rope,
                             backend=self.backend if on_cuda or self.backend in ("cpu",
                                                                                 "reference")
                             else "cpu",
                             context=self.context, device=dev if on_cuda else None,
                             **({} if self.kv_dtype is None else {"kv_dtype": self.kv_dtype}))
        if (self.plan.device is None) == on_cuda:
            raise invalid("the plan runs on %s but the buffers are on %s"
                          % (self.plan.backend, dev))
        W, H, words = self.d_latent + self.d_rope, self.num_heads, self.plan.mask_words
        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[
            self.plan.dtype]
        if self._rows:
            self.page_table = r2t
            self.page_rows = torch.zeros(B, dtype=i32, device=dev)
        else:
            self.page_table = torch.zeros((B, self.max_kv_len), dtype=i32, device=dev)
            self.page_rows = None
        # q_indptr never changes: arange * n in verify, arange in decode (the update reads
        # the first bs + 1 entries)
        self.q_indptr = torch.arange(B + 1, dtype=i32, device=dev) * n
        self.q_indptr_decode = torch.arange(B + 1, dtype=i32, device=dev)
        self.kv_lens = torch.zeros(B, dtype=i32, device=dev)
        self._masks = TreeMaskBuffer(T, n, words, dev)
        self.tree_mask = self._masks.buf
        self.q_buf = torch.zeros((T, H, W), dtype=tdt, device=dev)
        self.out = torch.zeros((T, H, self.d_latent), dtype=tdt, device=dev)
        self.lse = torch.zeros((T, H), dtype=torch.float32, device=dev)
        self._mask_addr = self.tree_mask.data_ptr()
        self._Tensor = torch.Tensor
        self._dev = self.kv_lens.device  # with its index
        r2t_src = None
        if not self._rows and r2t.dtype is i32 and r2t.device == self._dev:
            r2t_src = r2t if self.max_kv_len == r2t.shape[1] else r2t[:, :self.max_kv_len]
        self._pt_src = r2t_src
        kvdt = self.plan._torch_fast()[4:6]
        self._tdt = tdt
        self._kvdt = kvdt
        self._T, self._W = T, W
        self._q_numel = T * H * W
        self._fp8 = self.plan.kv_dtype == "fp8_e4m3"
        self._slots = {}
        self._out_views = {}
        self._mem = MEM_HOST if self.plan.device is None else MEM_DEVICE

    # -- SGLang's hooks ------------------------------------------------------------------------

    def init_cuda_graph_state(self, max_bs, max_num_tokens=None, kv_indices_buf=None):
        """Make the plan and the fixed buffers for up to max_bs requests (n tokens each)."""
        max_bs = int32_arg("max_bs", max_bs, 1)
        if max_num_tokens is not None and int(max_num_tokens) > max_bs * self.n:
            # SGLang sizes max_num_tokens as max_bs * num_tokens_per_req
            max_bs = -(-int(max_num_tokens) // self.n)
        if self.plan is None:
            self.max_batch = max(self.max_batch, max_bs)
        elif max_bs > self.max_batch:
            raise invalid("init_cuda_graph_state(max_bs=%d) after the buffers were made for "
                          "%d requests (a captured graph holds them): give max_batch=%d at "
                          "construction" % (max_bs, self.max_batch, max_bs))
        self._ensure()

    def get_cuda_graph_seq_len_fill_value(self):
        """SGLang pads a graph's seq_lens with this (a valid prefix of 1 row)."""
        return 1

    def get_verify_buffers_to_fill_after_draft(self):
        """No buffer of this backend is filled by the draft: the mask is read from
        spec_info.custom_mask in the metadata."""
        return [None, None]

    def update_verify_buffers_to_fill_after_draft(self, spec_info, cuda_graph_bs):
        pass

    def on_after_cuda_graph_warmup(self):
        pass

    def init_forward_metadata(self, forward_batch):
        """The eager path: the per-step metadata from a ForwardBatch."""
        self.init_forward_metadata_out_graph(forward_batch)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        """The per-step metadata (before capture, before every replay, eager): fixed buffers
        and the plan's update, nothing recorded into the graph."""
        fb = forward_batch
        self._metadata(fb.batch_size, fb.req_pool_indices, fb.seq_lens,
                       getattr(fb, "spec_info", None), fb.forward_mode)

    def init_forward_metadata_in_graph(self, forward_batch):
        """Nothing: what a layer reads was written by init_forward_metadata_out_graph."""

    # SGLang before 2026-06-02
    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices,
                                                 seq_lens, encoder_lens=None,
                                                 forward_mode=None, spec_info=None):
        self._metadata(bs, req_pool_indices, seq_lens, spec_info, forward_mode)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens,
                                                seq_lens_sum=None, encoder_lens=None,
                                                forward_mode=None, spec_info=None,
                                                seq_lens_cpu=None):
        self._metadata(bs, req_pool_indices, seq_lens, spec_info, forward_mode)

    def _mode(self, forward_mode):
        k = self._kind_of.get(forward_mode)
        if k is None:
            k = VERIFY if forward_mode is None else _kind(forward_mode)
            if forward_mode is not None and len(self._kind_of) < 64:  # SGLang: a few enums
                self._kind_of[forward_mode] = k
        return k

    def _refuse(self, forward_mode):
        raise UnsupportedError(ERR_UNSUPPORTED, "MlaVerifyAttnBackend runs target verify, decode "
                               "and idle batches, not %r: send extend to another backend (%s)"
                               % (forward_mode, _FLAGS))

    def _metadata(self, bs, req_pool_indices, seq_lens, spec_info, forward_mode):
        kind = self._mode(forward_mode)
        if kind is IDLE:
            self._step, self.bs = IDLE, 0
            return
        if kind is OTHER:
            self._refuse(forward_mode)
        if type(bs) is not int or bs < 0 or bs > 2**31 - 1:
            bs = int32_arg("bs", bs, 0)
        self._ensure()
        if bs > self.max_batch:
            raise invalid("batch %d is more than the backend's max_batch %d (the request pool's "
                          "size unless given)" % (bs, self.max_batch))
        torch = torch_module()
        verify = kind is VERIFY
        seq = seq_lens[:bs]
        rows = req_pool_indices[:bs]
        if self._rows:  # B indices into the shared req_to_token
            self.page_rows[:bs].copy_(rows)
        else:  # the rows themselves, gathered into the private page table
            if rows.dtype is not torch.int64 and rows.dtype is not torch.int32:
                rows = rows.to(torch.int64)
            if self._pt_src is not None and rows.device == self._dev:
                torch.index_select(self._pt_src, 0, rows, out=self.page_table[:bs])
            else:  # another dtype or place: gathered, then converted / moved
                self.page_table[:bs].copy_(self.req_to_token[rows, :self.max_kv_len])
        add = self.n if verify else 0
        if (seq.dtype is torch.int64 or seq.dtype is torch.int32) and seq.device == self._dev:
            torch.add(seq, add, out=self.kv_lens[:bs])
        else:
            self.kv_lens[:bs].copy_(seq + add)
        if verify:
            mask = None
            if spec_info is not None:
                self._check_spec(spec_info)
                mask = getattr(spec_info, "custom_mask", None)
            self._masks.write(self.mask_mode, bs, seq, mask)
        self._step, self.bs = kind, bs
        self._tokens = bs * self.n if verify else bs
        self._step_mask = self._mask_addr if verify else None
        self.plan.update(self.q_indptr if verify else self.q_indptr_decode, self.kv_lens,
                         batch=bs)

    def _check_spec(self, spec_info):
        """Refuse verify inputs of another shape than n tokens per request."""
        if getattr(spec_info, "ragged_verify_layout", None) is not None:
            raise UnsupportedError(ERR_UNSUPPORTED, "MlaVerifyAttnBackend verifies %d tokens per "
                                   "request; a ragged verify layout is not supported" % self.n)
        per = getattr(spec_info, "draft_token_num", None)
        if isinstance(per, int) and per != self.n:
            raise invalid("the step verifies %d draft tokens per request but the backend was "
                          "made for %d (num_draft_tokens)" % (per, self.n))

    # -- forward -------------------------------------------------------------------------------

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        mode = forward_batch.forward_mode
        kind = self._kind_of.get(mode) or self._mode(mode)
        if kind is IDLE:
            return q.new_empty((q.shape[0], self.num_heads * self.d_latent))
        if kind is OTHER:
            self._refuse(forward_batch.forward_mode)
        return self._attend(kind, q, k, layer, forward_batch, save_kv_cache, **kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self._attend(DECODE, q, k, layer, forward_batch, save_kv_cache, **kwargs)

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        """Target verify only (SGLang's base class sends it here as an extend mode)."""
        kind = self._mode(getattr(forward_batch, "forward_mode", None))
        if kind is not VERIFY:
            self._refuse(getattr(forward_batch, "forward_mode", None))
        return self._attend(VERIFY, q, k, layer, forward_batch, save_kv_cache, **kwargs)

    def _pool(self, forward_batch):
        pool = self.token_to_kv_pool
        if pool is None:
            pool = getattr(forward_batch, "token_to_kv_pool", None)
        if pool is None:
            try:
                from sglang.srt.model_executor.forward_context import (get_token_to_kv_pool,
                                                                       has_forward_context)
            except ImportError:
                has_forward_context = None
            if has_forward_context is not None and has_forward_context():
                pool = get_token_to_kv_pool()
        if pool is None:
            raise invalid("no KV pool: give token_to_kv_pool (or a model_runner), or run inside "
                          "SGLang's forward context")
        return pool

    def _layer_scale(self, layer, kv_scale):
        """An FP8 pool's scale for reading: forward's kv_scale, the layer's k_scale_float, 1."""
        if kv_scale is not None:
            return kv_scale
        s = getattr(layer, "k_scale_float", None)
        return 1.0 if s is None else s

    def _save(self, pool, layer, forward_batch, k, k_rope):
        """Write this step's k rows into the pool at out_cache_loc; for an FP8 pool divided by
        the layer's k_scale first (as SGLang's Triton backend does: the pool casts without
        scaling, and reads multiply by the scale)."""
        loc = forward_batch.out_cache_loc
        if self._fp8:
            ks = getattr(layer, "k_scale", None)
            if ks is None:
                ks = getattr(layer, "k_scale_float", None)
            if ks is not None:  # fresh tensors: the caller's k is used again
                k = k.clone().div_(ks)
                if k_rope is not None:
                    k_rope = k_rope.clone().div_(ks)
        if k_rope is not None:
            pool.set_mla_kv_buffer(layer, loc, k, k_rope)
        else:
            pool.set_kv_buffer(layer, loc, k, k)

    def _attend(self, kind, q, k, layer, forward_batch, save_kv_cache=True, q_rope=None,
                k_rope=None, kv_scale=None, **kwargs):
        """One layer: q [T, H * (Dl + Dr)] or [T, H, Dl + Dr] (or q_nope and q_rope apart);
        returns [T, H * Dl]."""
        if self.plan is None or self._step is None:
            raise invalid("call init_forward_metadata (or init_forward_metadata_out_graph) "
                          "before forward")
        if kind is not self._step:
            raise invalid("forward of a %s batch after the metadata of a %s batch"
                          % (kind, self._step))
        slot = self._slots.get(layer.layer_id)
        if slot is None or slot[0] is not layer:
            slot = self._slot(layer)
        pool = self.token_to_kv_pool
        if pool is None:
            pool = self._pool(forward_batch)
        if save_kv_cache and k is not None:
            self._save(pool, layer, forward_batch, k, k_rope)
        kv = pool.get_key_buffer(layer.layer_id)
        T = q.shape[0]
        if T != self._tokens:
            raise invalid("q has %d tokens but the step's metadata %d (%d requests)"
                          % (T, self._tokens, self.bs))
        if self._fp8:
            kv_scale = self._layer_scale(layer, kv_scale)
        if self.custom_op:
            return self._attend_op(q, q_rope, kv, kind, kv_scale, T)
        # q itself when it is a whole fixed-shape buffer, else copied into q_buf
        if q_rope is None and type(q) is self._Tensor and q.dtype is self._tdt and \
                T == self._T and q.device == self._dev and q.is_contiguous() and \
                q.numel() == self._q_numel:
            qp = q.data_ptr()
        else:
            qp = self._q_buffer(q, q_rope, T).data_ptr()
        t = slot[1]
        # the pool's pointer: checked once per tensor object (a pool hands out the same one)
        kp = kv.data_ptr()
        if kv is not slot[3] or kp != slot[4]:
            self._pool_ptr(kv)
            slot[3], slot[4] = kv, kp
        t.q, t.kv_cache, t.num_pages = qp, kp, kv.shape[0]
        t.tree_mask = self._step_mask
        if self._fp8:
            set_kv_scale(t, kv_scale, self.plan.device)
        self.plan._run_ref(slot[2])
        return self._out_view(T)

    def _attend_op(self, q, q_rope, kv, kind, kv_scale, T):
        """A layer through torch.ops.mlaverify.verify_step (fresh outputs)."""
        q3 = self._q_buffer(q, q_rope, T)
        kv3 = kv.view(kv.shape[0], 1, self._W) if kv.dim() == 2 else kv
        self._pool_ptr(kv3)
        out, _ = self._verify_step(self.plan, q3, kv3, self.page_table,
                                   self.tree_mask if kind is VERIFY else None,
                                   kv_scale=kv_scale if self._fp8 else None)
        return (out if T == self._T else out[:T]).view(T, self.num_heads * self.d_latent)

    def _q_buffer(self, q, q_rope, T):
        H, Dl = self.num_heads, self.d_latent
        if q_rope is not None:
            self.q_buf[:T, :, :Dl].copy_(q.reshape(T, H, Dl))
            self.q_buf[:T, :, Dl:].copy_(q_rope.reshape(T, H, self.d_rope))
        else:
            self.q_buf[:T].copy_(q.reshape(T, H, self._W))
        return self.q_buf

    def _pool_ptr(self, kv):
        """The pool's pointer after its checks (what the plan reads: [rows, 1, W] or
        [rows, W] rows of the pool's dtype, dense, beside the buffers)."""
        W = self._W
        if type(kv) is self._Tensor and (kv.dtype is self._kvdt[0] or
                                          kv.dtype is self._kvdt[1]) \
                and kv.device == self._dev and kv.is_contiguous():
            ks = kv.shape
            nd = len(ks)
            if (nd == 3 and ks[1] == 1 and ks[2] == W) or (nd == 2 and ks[1] == W):
                return kv.data_ptr()
        torch = torch_module()
        if not isinstance(kv, torch.Tensor):
            raise invalid("kv_cache is a %s, not a torch tensor" % type(kv).__name__)
        if kv.device != self._dev:
            raise invalid("kv_cache is on %s but the backend's buffers are on %s"
                          % (kv.device, self._dev))
        if kv.dtype is not self._kvdt[0] and kv.dtype is not self._kvdt[1]:
            raise invalid("kv_cache has dtype %s; the plan's kv dtype %s needs %s"
                          % (str(kv.dtype).replace("torch.", ""), self.plan.kv_dtype,
                             " or ".join(sorted({str(d).replace("torch.", "")
                                                 for d in self._kvdt}))))
        if not kv.is_contiguous():
            raise invalid("kv_cache (strides %s) is not contiguous" % (list(kv.stride()),))
        raise invalid("kv_cache has shape %s, expected [rows, 1, %d] or [rows, %d]"
                      % (list(kv.shape), W, W))

    def _slot(self, layer):
        """The layer's mlav_tensors with the fixed buffers' pointers, after the checks of the
        layer against the backend (made at its first forward)."""
        H = self.num_heads
        if getattr(layer, "tp_q_head_num", H) != H:
            raise invalid("layer has %d heads, the backend %d" % (layer.tp_q_head_num, H))
        hd = getattr(layer, "head_dim", None)
        if isinstance(hd, int) and hd != self._W:
            raise invalid("layer %d has head_dim %d; the backend reads %d + %d"
                          % (layer.layer_id, hd, self.d_latent, self.d_rope))
        scaling = getattr(layer, "scaling", None)
        if isinstance(scaling, (int, float)) and \
                abs(float(scaling) - self.softmax_scale) > 1e-6 * abs(float(scaling)):
            raise invalid("layer %d's softmax scale (layer.scaling) is %r but the backend was "
                          "made with %r: give the model's scale, YaRN's mscale included"
                          % (layer.layer_id, float(scaling), self.softmax_scale))
        t = _lib.MlavTensors(memory=self._mem, page_table=self.page_table.data_ptr(),
                             out=self.out.data_ptr(), lse=self.lse.data_ptr())
        if self._rows:
            t.page_table_rows = self.page_rows.data_ptr()
            t.page_table_num_rows = int(self.page_table.shape[0])
        # [layer, struct, its byref, the pool tensor last checked, its pointer]
        slot = self._slots[layer.layer_id] = [layer, t, ctypes.byref(t), None, None]
        return slot

    def _out_view(self, T):
        """out[:T] as [T, H * Dl], made once per T (a view of the shared out buffer)."""
        v = self._out_views.get(T)
        shape = (T, self.num_heads * self.d_latent)
        if v is None or v.shape != shape:
            v = self._out_views[T] = self.out[:T].view(shape)
        return v

    # -- SGLang's base-class defaults, for the duck-typed class --------------------------------

    def get_indexer_metadata(self, layer_id, forward_batch):
        return None

    def support_triton(self):
        return True

    def close(self):
        if self.plan is not None:
            self.plan.close()
            self.plan = None


__all__ = ["MlaVerifyAttnBackend", "library_reads_page_table_rows"]
