"""An SGLang attention backend for target verify (EAGLE-style draft trees on MLA models).

It follows SGLang's AttentionBackend hooks (base_attn_backend.py) without importing SGLang:
``forward_batch``, ``spec_info``, ``layer`` and the KV pool are duck-typed, so this module
imports with numpy and torch only.

    backend = MlaVerifyAttnBackend(num_heads=layer.tp_q_head_num, softmax_scale=layer.scaling,
                                   num_draft_tokens=server_args.speculative_num_draft_tokens,
                                   req_to_token=req_to_token_pool.req_to_token,
                                   max_batch=max_bs, dtype="bf16", device="cuda:0",
                                   mask_mode="full")  # SGLang's tree_mask_mode
    backend.init_cuda_graph_state(max_bs, max_num_tokens)        # once: plan + fixed buffers
    backend.init_forward_metadata_capture_cuda_graph(bs, num_tokens, req_pool_indices,
                                                     seq_lens, None, forward_mode, spec_info)
    ... capture the model forward: every layer calls backend.forward(q, k, v, layer, fb)
    per step: backend.init_forward_metadata_replay_cuda_graph(bs, req_pool_indices, seq_lens,
                                                              seq_lens_sum, None, mode,
                                                              spec_info, seq_lens_cpu)
              graph.replay()

Per step (once, not per layer) the metadata hooks write into fixed buffers, with torch ops on
the current stream and no host synchronization: the page table
``req_to_token[req_pool_indices, :max_pages]`` (page_size 1), ``kv_lens = seq_lens + n``
(SGLang's seq_lens in target verify exclude the n draft tokens; ``q_indptr = arange * n`` is
written once), and the packed tree mask from ``spec_info.custom_mask`` (FULL_MASK, QLEN_ONLY,
QLEN_ONLY_BITPACKING, or the library's own packed words); then ``StepPlan.update`` with those
device lengths. Each layer's forward then only packs q into a fixed buffer (when it is not
already one) and runs the plan: on a layer's own prebuilt mlav_tensors when q and the pool pass
their checks (a few microseconds over a bare mlav_run; ``python -m mlaverify.overhead``), else
through ``StepPlan.run`` and its full checks.

On CPU tensors (tests, CI) the same code runs with a CPU StepPlan; its update then reads the
lengths on the host.
"""
import ctypes

from . import _lib
from ._arrays import torch_module
from .api import MEM_DEVICE, MEM_HOST
from .errors import UnsupportedError, ERR_UNSUPPORTED, invalid
from .sglang import BITPACKED_DTYPES, bitpacked_to_words, pack_visible_torch
from .steps import StepPlan, int32_arg, set_kv_scale


def _mode_is(forward_mode, name):
    f = getattr(forward_mode, name, None)
    return bool(f()) if callable(f) else False


class MlaVerifyAttnBackend:
    """Target-verify attention through a mlaverify StepPlan (see the module doc).

    num_heads, softmax_scale      the layer's tp_q_head_num and scaling
    num_draft_tokens              n: draft nodes per request (SGLang's uniform draft)
    req_to_token                  [pool_rows, context_len] int32: req_to_token_pool.req_to_token
    max_batch                     the most requests in a step (also set by init_cuda_graph_state)
    max_kv_len                    longest prefix + draft (default req_to_token.shape[1])
    d_latent, d_rope, dtype       512, 64, "bf16"
    device                        where the buffers live (default req_to_token's device)
    mask_mode                     "auto" (from the mask's dtype and shape: bit-packed integers,
                                  the library's packed words, a 2-D bool QLEN_ONLY; a flat bool
                                  mask needs "full" or "qlen" said), "full", "qlen",
                                  "bitpacking", "packed" or "causal" (ignore custom_mask)
    custom_op                     run every layer through torch.ops.mlaverify.verify_step
                                  (fresh outputs, one op for torch.compile) instead of
                                  StepPlan.run into the backend's fixed out buffer
    model_runner                  optional: req_to_token, device and num_draft_tokens are taken
                                  from it (req_to_token_pool.req_to_token, device,
                                  server_args.speculative_num_draft_tokens) when not given
    kv_dtype                      None (the pool has `dtype`) or "fp8_e4m3": an FP8 E4M3 pool
                                  (uint8 bytes or torch.float8_e4m3fn); forward's kv_scale,
                                  else the layer's k_scale_float, else 1.0 is its scale

    The output of forward is a view of a buffer shared by all layers (unless custom_op): it is
    valid until the next layer's attention, as SGLang's o_proj consumes it at once.
    """

    def __init__(self, num_heads, softmax_scale, num_draft_tokens=None, req_to_token=None, *,
                 max_batch=None, max_kv_len=None, d_latent=512, d_rope=64, dtype="bf16",
                 device=None, backend="auto", mask_mode="auto", custom_op=False,
                 model_runner=None, context=None, kv_dtype=None):
        torch = torch_module()
        if torch is None:
            raise invalid("MlaVerifyAttnBackend needs torch (import torch first)")
        if model_runner is not None:
            if req_to_token is None:
                req_to_token = model_runner.req_to_token_pool.req_to_token
            if num_draft_tokens is None:
                num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens
            if device is None:
                device = getattr(model_runner, "device", None)
        if req_to_token is None or num_draft_tokens is None:
            raise invalid("give req_to_token and num_draft_tokens (or a model_runner)")
        if mask_mode not in ("auto", "full", "qlen", "bitpacking", "packed", "causal"):
            raise invalid("mask_mode %r is not auto, full, qlen, bitpacking, packed or causal"
                          % (mask_mode,))
        self.num_heads = int32_arg("num_heads", num_heads, 1)
        self.softmax_scale = float(softmax_scale)
        self.n = int32_arg("num_draft_tokens", num_draft_tokens, 1)
        self.req_to_token = req_to_token
        self.device = torch.device(device) if device is not None else req_to_token.device
        cols = int(req_to_token.shape[1])
        self.max_kv_len = int32_arg("max_kv_len", cols if max_kv_len is None else max_kv_len,
                                    self.n, cols)
        self.d_latent, self.d_rope = int(d_latent), int(d_rope)
        self.dtype = dtype
        self.backend = backend
        self.context = context
        self.mask_mode = mask_mode
        self.custom_op = bool(custom_op)
        if self.custom_op:
            from .torch_ops import verify_step
            self._verify_step = verify_step
        self.max_batch = None if max_batch is None else int32_arg("max_batch", max_batch, 1)
        self.kv_dtype = kv_dtype
        self.plan = None
        self.bs = None
        self._mode_ok = None  # the last forward_mode object seen to be target verify

    # -- buffers -------------------------------------------------------------------------------

    def _ensure(self, bs):
        """The StepPlan and the fixed buffers (made once, for max_batch requests)."""
        if self.plan is None and self.max_batch is None:
            self.max_batch = int(bs)
        if bs > self.max_batch:
            raise invalid("batch %d is more than the backend's max_batch %d (set at "
                          "init_cuda_graph_state or construction)" % (bs, self.max_batch))
        if self.plan is not None:
            return
        torch = torch_module()
        B, n = self.max_batch, self.n
        T = B * n
        dev = self.device
        on_cuda = dev.type == "cuda"
        self.plan = StepPlan(self.num_heads, self.softmax_scale, self.dtype, 1, self.max_kv_len,
                             B, T, n, self.max_kv_len, d_latent=self.d_latent,
                             d_rope=self.d_rope, backend=self.backend if on_cuda or self.backend in ("cpu", "reference")
                             else "cpu",
                             context=self.context, device=dev if on_cuda else None,
                             **({} if self.kv_dtype is None else {"kv_dtype": self.kv_dtype}))
        if (self.plan.device is None) == on_cuda:
            raise invalid("the plan runs on %s but the buffers are on %s"
                          % (self.plan.backend, dev))
        i32 = torch.int32
        W, H, words = self.d_latent + self.d_rope, self.num_heads, self.plan.mask_words
        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[
            self.plan.dtype]
        self.page_table = torch.zeros((B, self.max_kv_len), dtype=i32, device=dev)
        # q_indptr = arange * n never changes (the update reads its first bs + 1 entries)
        self.q_indptr = torch.arange(B + 1, dtype=i32, device=dev) * n
        self.kv_lens = torch.zeros(B, dtype=i32, device=dev)
        self.tree_mask = torch.zeros((T, words), dtype=i32, device=dev)
        self.q_buf = torch.zeros((T, H, W), dtype=tdt, device=dev)
        self.out = torch.zeros((T, H, self.d_latent), dtype=tdt, device=dev)
        self.lse = torch.zeros((T, H), dtype=torch.float32, device=dev)
        self._node = torch.arange(n, dtype=torch.int64, device=dev)
        self._shifts = torch.arange(32, dtype=torch.int64, device=dev)
        # int32 weights of nodes 0..n-1 for a one-word mask (node 31 is the sign bit)
        self._bits = torch.tensor([(1 << k) if k < 31 else -2**31 for k in range(min(n, 32))],
                                  dtype=i32, device=dev)
        self._use_mask = True
        self._mask_ptr = self.tree_mask.data_ptr()
        self._dev = self.page_table.device  # with its index
        r2t = self.req_to_token
        # the page table is gathered in place when req_to_token is int32 beside the buffers
        self._pt_src = None if r2t.dtype is not i32 or r2t.device != self._dev else \
            r2t if self.max_kv_len == r2t.shape[1] else r2t[:, :self.max_kv_len]
        # the per-layer fast path: what q and the pool must be (compared by identity), one
        # mlav_tensors per layer with the fixed buffers' pointers set once, the output views
        kvdt = self.plan._torch_fast()[4:6]
        self._fast = (torch.Tensor, torch.strided, self._dev, tdt, kvdt[0], kvdt[1], T,
                      T * H * W, W)
        self._fp8 = self.plan.kv_dtype == "fp8_e4m3"
        self._slots = {}
        self._out_views = {}

    # -- SGLang's hooks ------------------------------------------------------------------------

    def init_cuda_graph_state(self, max_bs, max_num_tokens=None, kv_indices_buf=None):
        """Make the plan and the fixed buffers for up to max_bs requests (n tokens each)."""
        max_bs = int32_arg("max_bs", max_bs, 1)
        if max_num_tokens is not None and int(max_num_tokens) > max_bs * self.n:
            # SGLang sizes max_num_tokens as max_bs * num_draft_tokens in target verify
            max_bs = -(-int(max_num_tokens) // self.n)
        if self.plan is None:
            self.max_batch = max(self.max_batch or 0, max_bs)
        self._ensure(max_bs)

    def get_cuda_graph_seq_len_fill_value(self):
        """SGLang pads a graph's seq_lens with this (a valid prefix of 1 row)."""
        return 1

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices,
                                                 seq_lens, encoder_lens=None,
                                                 forward_mode=None, spec_info=None):
        self._metadata(bs, req_pool_indices, seq_lens, spec_info, forward_mode)

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices, seq_lens,
                                                seq_lens_sum=None, encoder_lens=None,
                                                forward_mode=None, spec_info=None,
                                                seq_lens_cpu=None):
        self._metadata(bs, req_pool_indices, seq_lens, spec_info, forward_mode)

    def init_forward_metadata(self, forward_batch):
        """The eager path: the same per-step metadata from a ForwardBatch."""
        bs = int(forward_batch.batch_size)
        self._metadata(bs, forward_batch.req_pool_indices, forward_batch.seq_lens,
                       getattr(forward_batch, "spec_info", None),
                       getattr(forward_batch, "forward_mode", None))

    def _check_mode(self, forward_mode):
        """Refuse anything but target verify; the enum member seen to be it is remembered (an
        SGLang ForwardMode is an IntEnum: the same object every step)."""
        if forward_mode is None or forward_mode is self._mode_ok:
            return
        if not _mode_is(forward_mode, "is_target_verify"):
            raise UnsupportedError(ERR_UNSUPPORTED, "MlaVerifyAttnBackend runs target verify "
                                   "only (forward_mode %r)" % (forward_mode,))
        if not _mode_is(forward_mode, "is_decode"):
            self._mode_ok = forward_mode

    def _metadata(self, bs, req_pool_indices, seq_lens, spec_info, forward_mode):
        self._check_mode(forward_mode)
        if type(bs) is not int or bs < 0 or bs > 2**31 - 1:
            bs = int32_arg("bs", bs, 0)
        self._ensure(max(bs, 1))
        torch = torch_module()
        self.bs = bs
        seq = seq_lens[:bs]
        # page table: request b's slots, prefix then draft (page_size 1), gathered in place
        rows = req_pool_indices[:bs]
        if rows.dtype is not torch.int64 and rows.dtype is not torch.int32:
            rows = rows.to(torch.int64)
        if self._pt_src is not None and rows.device == self._dev:
            torch.index_select(self._pt_src, 0, rows, out=self.page_table[:bs])
        else:  # another dtype or place: gathered, then converted / moved
            self.page_table[:bs].copy_(self.req_to_token[rows, :self.max_kv_len])
        if (seq.dtype is torch.int64 or seq.dtype is torch.int32) and seq.device == self._dev:
            torch.add(seq, self.n, out=self.kv_lens[:bs])
        else:
            self.kv_lens[:bs].copy_(seq + self.n)
        mask = getattr(spec_info, "custom_mask", None) if spec_info is not None else None
        self._use_mask = self._write_mask(bs, seq, mask)
        self._mask_ptr = self.tree_mask.data_ptr() if self._use_mask else None
        self.plan.update(self.q_indptr, self.kv_lens, batch=bs)

    def _write_mask(self, bs, seq, mask):
        """Write the packed mask of the first bs * n rows; False for a causal chain."""
        if mask is None or self.mask_mode == "causal":
            return False
        torch = torch_module()
        n, T, words = self.n, bs * self.n, self.plan.mask_words
        dt = str(mask.dtype).replace("torch.", "")
        mode = self.mask_mode
        if mode == "auto":
            if dt == "bool":
                # A flat bool mask is FULL_MASK or QLEN_ONLY, a server-wide choice in SGLang,
                # and its size cannot tell them apart without the prefix lengths, which live on
                # the device (a padded batch's FULL_MASK of short prefixes has the size of a
                # QLEN_ONLY one): guessing would be a silent wrong answer, so it is refused.
                if mask.dim() != 2:
                    raise invalid("a flat bool custom_mask may be FULL_MASK or QLEN_ONLY: pass "
                                  "mask_mode='full' or 'qlen' (SGLang's tree_mask_mode)")
                mode = "qlen"
            elif mask.dim() == 2:
                mode = "packed"
            else:
                mode = "bitpacking"
        # the mask may cover the real requests only (a padded graph batch): the rows it has
        rows = min(int(mask.shape[0]), T) if mode in ("packed", "bitpacking") else T
        if mode == "packed":
            if mask.dim() != 2 or mask.shape[1] != words or dt not in ("int32", "uint32"):
                raise invalid("a packed custom_mask must be int32 [<= %d, %d], not %s %s"
                              % (T, words, dt, list(mask.shape)))
            self.tree_mask[:rows].copy_(mask[:rows].view(torch.int32))
            return True
        if mode == "bitpacking":
            if mask.dim() != 1 or dt not in BITPACKED_DTYPES:
                raise invalid("a QLEN_ONLY_BITPACKING custom_mask must be [<= %d] of %s, not "
                              "%s %s" % (T, "/".join(BITPACKED_DTYPES), dt, list(mask.shape)))
            if words != 1:
                raise invalid("a bit-packed mask holds 32 nodes at most; num_draft_tokens = %d"
                              % n)
            self.tree_mask[:rows].copy_(bitpacked_to_words(mask[:rows]))
            return True
        if dt != "bool":
            raise invalid("a %s custom_mask must be bool, not %s" % (mode.upper(), dt))
        if mode == "qlen":
            flat = mask.reshape(-1)
            rows = min(flat.numel() // n, T)
            if rows == 0:
                raise invalid("a QLEN_ONLY custom_mask needs n * n = %d entries per request, "
                              "not %d in all" % (n * n, flat.numel()))
            vis = flat[:rows * n].view(rows, n)
        else:  # full: request b's rows [n, seq_b + n], the draft columns after the prefix
            flat = mask.reshape(-1)
            kv = seq.to(torch.int64) + n                                        # [bs]
            start = torch.cumsum(kv * n, 0) - kv * n                            # [bs]
            i = self._node
            idx = (start + seq.to(torch.int64))[:, None, None] + \
                i[None, :, None] * kv[:, None, None] + i[None, None, :]         # [bs, n, n]
            if flat.numel() == 0:
                raise invalid("the FULL_MASK custom_mask is empty")
            vis = flat[idx.clamp_(0, flat.numel() - 1)].view(T, n)
            rows = T
        if words == 1 and vis.device == self._dev:
            # bit k = node k, summed in int32 (distinct bits: exact, no overflow)
            torch.sum(vis * self._bits, -1, dtype=torch.int32, out=self.tree_mask[:rows, 0])
        else:
            self.tree_mask[:rows].copy_(pack_visible_torch(vis, words, self._shifts))
        return True

    # -- forward -------------------------------------------------------------------------------

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        mode = getattr(forward_batch, "forward_mode", None)
        if mode is not None and mode is not self._mode_ok and _mode_is(mode, "is_decode"):
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache, **kwargs)

    def forward_decode(self, *args, **kwargs):
        raise UnsupportedError(ERR_UNSUPPORTED, "MlaVerifyAttnBackend runs target verify only "
                               "(no decode)")

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None,
                       k_rope=None, kv_scale=None, **kwargs):
        """One layer's verify attention: q [T, H * (Dl + Dr)] or [T, H, Dl + Dr] (or q_nope
        and q_rope separately); returns [T, H * Dl]. Saves k (and k_rope) into the pool at
        out_cache_loc first when asked. kv_scale: an FP8 pool's scale (a float or a 1-element
        float32 tensor), default the layer's k_scale_float, else 1.0."""
        if self.plan is None or self.bs is None:
            raise invalid("call init_forward_metadata (or the CUDA-graph hooks) before forward")
        self._check_mode(getattr(forward_batch, "forward_mode", None))
        H, Dl, W = self.num_heads, self.d_latent, self.d_latent + self.d_rope
        lid = layer.layer_id
        slot = self._slots.get(lid)
        if slot is None or slot[0] is not layer:
            if getattr(layer, "tp_q_head_num", H) != H:
                raise invalid("layer has %d heads, the backend %d" % (layer.tp_q_head_num, H))
            slot = self._slot(layer)
        pool = forward_batch.token_to_kv_pool
        if save_kv_cache and k is not None:
            loc = forward_batch.out_cache_loc
            if k_rope is not None:
                pool.set_mla_kv_buffer(layer, loc, k, k_rope)
            else:
                pool.set_kv_buffer(layer, loc, k, v)
        kv = pool.get_key_buffer(lid)
        if self._fp8 and kv_scale is None:
            kv_scale = getattr(layer, "k_scale_float", None)
            kv_scale = 1.0 if kv_scale is None else kv_scale
        T = q.shape[0]
        if q_rope is None and not self.custom_op:
            # the fast path: q and the pool checked here by identity, the rest are the fixed
            # buffers whose pointers the slot's struct holds; anything else takes the full path
            Tensor, strided, dev, qdt, kdt, kdt2, T_max, q_numel, _ = self._fast
            if isinstance(q, Tensor) and isinstance(kv, Tensor) and q.dtype is qdt and \
                    (kv.dtype is kdt or kv.dtype is kdt2) and q.device == dev and \
                    kv.device == dev and q.layout is strided and kv.layout is strided and \
                    T == T_max and q.is_contiguous() and kv.is_contiguous() and \
                    q.numel() == q_numel:
                ks = kv.shape
                nd = len(ks)
                if (nd == 3 and ks[1] == 1 and ks[2] == W) or (nd == 2 and ks[1] == W):
                    t, ref = slot[1], slot[2]
                    t.q, t.kv_cache, t.num_pages = q.data_ptr(), kv.data_ptr(), ks[0]
                    t.tree_mask = self._mask_ptr
                    if self._fp8:
                        set_kv_scale(t, kv_scale, self.plan.device)
                    self.plan._run_ref(ref)
                    return self._out_view(T)
        if kv.dim() == 2:
            kv = kv.view(kv.shape[0], 1, W)
        T_max = self.q_buf.shape[0]
        if q_rope is not None:
            self.q_buf[:T, :, :Dl].copy_(q.view(T, H, Dl))
            self.q_buf[:T, :, Dl:].copy_(q_rope.view(T, H, self.d_rope))
            q3 = self.q_buf
        else:
            q3 = q.view(T, H, W)
            if T != T_max or not q3.is_contiguous() or q3.dtype != self.q_buf.dtype:
                self.q_buf[:T].copy_(q3)
                q3 = self.q_buf
        mask = self.tree_mask if self._use_mask else None
        if self.custom_op:
            out, _ = self._verify_step(self.plan, q3, kv, self.page_table, mask,
                                       kv_scale=kv_scale if self._fp8 else None)
            return (out if T == T_max else out[:T]).view(T, H * Dl)
        self.plan.run(q3, kv, self.page_table, mask, out=self.out, lse=self.lse,
                      kv_scale=kv_scale if self._fp8 else None)
        return self._out_view(T)

    def _slot(self, layer):
        """The layer's mlav_tensors with the fixed buffers' pointers (page table, out, lse)."""
        t = _lib.MlavTensors(memory=MEM_HOST if self.plan.device is None else MEM_DEVICE,
                             page_table=self.page_table.data_ptr(), out=self.out.data_ptr(),
                             lse=self.lse.data_ptr())
        slot = self._slots[layer.layer_id] = (layer, t, ctypes.byref(t))
        return slot

    def _out_view(self, T):
        """out[:T] as [T, H * Dl], made once per T (a view of the shared out buffer)."""
        v = self._out_views.get(T)
        shape = (T, self.num_heads * self.d_latent)
        if v is None or v.shape != shape:
            v = self._out_views[T] = self.out[:T].view(shape)
        return v

    def close(self):
        if self.plan is not None:
            self.plan.close()
            self.plan = None


__all__ = ["MlaVerifyAttnBackend"]
