"""Adapter for SGLang-style verify inputs: a token pool, kv_indptr / kv_indices gather lists,
and SGLang's draft-tree masks, turned into the library's page table and packed mask.

    from mlaverify.sglang import SGLangVerifier
    verifier = SGLangVerifier(num_heads=layer.tp_q_head_num, softmax_scale=layer.scaling,
                              dtype="bf16")
    # once per batch shape, outside CUDA-graph capture (host lengths: seq_lens_cpu)
    verifier.plan(prefix_lens=forward_batch.seq_lens_cpu, q_lens=num_draft_tokens,
                  device=q.device)
    # every step (capturable)
    out, lse = verifier.run(q, kv_buffer, kv_indptr=kv_indptr, kv_indices=kv_indices,
                            out_cache_loc=forward_batch.out_cache_loc,
                            custom_mask=spec_info.custom_mask)

Inputs (torch tensors on one CUDA device, or numpy / CPU torch for tests):

- ``q`` [T, H, 576] (or [T, H*576]): absorbed q_nope (512) then q_pe (64); T = sum of q_lens.
- ``kv_buffer`` [pool, 1, 576] (or [pool, 576]): SGLang's MLA token pool, one row per slot
  (page_size 1).
- where request b's KV rows are, one of:
  * ``kv_indptr`` [B+1] / ``kv_indices``: the prefix's slots (SGLang's triton backend in
    target-verify: ``kv_indptr[1:] = cumsum(seq_lens)``) plus ``out_cache_loc`` [T]: the
    draft tokens' slots, already written;
  * ``kv_indptr`` / ``kv_indices`` covering prefix and draft rows (flashinfer-MLA style:
    ``seq_lens + num_draft_tokens`` per request), no ``out_cache_loc``;
  * ``page_table`` [B, max_pages] int32 directly, e.g.
    ``req_to_token[req_pool_indices, :verifier.problem.max_pages]``.
- ``custom_mask``: SGLang's tree mask in any of its three modes (TreeMaskMode):
  * FULL_MASK: flat bool, per request [q_len, prefix_len + q_len] row-major; the prefix
    columns are taken as visible (the library's definition) and only the draft columns read;
  * QLEN_ONLY: flat bool, per request [q_len, q_len] (or a 2-D [T, max_q_len] bool);
  * QLEN_ONLY_BITPACKING: [T] uint8 / uint16 / int32 (/ uint32), bit k = draft node k;
  * or the library's own packed [T, words] int32 / uint32; None: a causal chain.

Everything ``run`` does on CUDA tensors is device work on the stream (gathers, packing, the
kernel): no host synchronization, so it can be captured in a CUDA graph once ``plan`` was
called with ``device=`` (which uploads the plan's small index tables).
"""
import numpy as np

from ._arrays import host_int32, is_torch, torch_module
from .api import Plan, Problem, dtype_name
from .errors import invalid


BITPACKED_DTYPES = ("uint8", "int8", "uint16", "int16", "int32", "uint32")


def bitpacked_to_words(mask):
    """SGLang's QLEN_ONLY_BITPACKING mask ([T] uint8 / uint16 / int32 / uint32, bit k = draft
    node k) as the library's packed [T, 1] words: int32 for torch (device ops only), uint32 for
    numpy."""
    dt = str(mask.dtype).replace("torch.", "")
    bits = {"uint8": 8, "int8": 8, "uint16": 16, "int16": 16}.get(dt, 32)
    T = mask.shape[0]
    if is_torch(mask):
        torch = torch_module()
        if bits == 32:
            m = mask if dt == "int32" else mask.view(torch.int32)
        else:
            m = mask.to(torch.int32) & ((1 << bits) - 1)
        return m.reshape(T, 1).contiguous()
    a = np.asarray(mask)
    a = a.view({8: np.uint8, 16: np.uint16, 32: np.uint32}[bits])
    return np.ascontiguousarray(a.astype(np.uint32).reshape(T, 1))


def pack_visible_torch(vis, words, shifts=None):
    """Pack a torch bool [rows, n] visibility mask (n <= 32 * words) into int32 words
    [rows, words], bit k of word k // 32 = node k; device ops only (capturable). `shifts`: an
    int64 arange(32) on vis's device, to spare its creation."""
    torch = torch_module()
    rows = vis.shape[0]
    if shifts is None:
        shifts = torch.arange(32, dtype=torch.int64, device=vis.device)
    padded = torch.zeros((rows, words * 32), dtype=torch.int64, device=vis.device)
    padded[:, :vis.shape[1]] = vis.to(torch.int64)
    w = (padded.view(rows, words, 32) << shifts).sum(-1)
    return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32)


class SGLangVerifier:
    """Verify attention for an engine holding SGLang-style inputs (see the module doc)."""

    def __init__(self, num_heads, softmax_scale, *, d_latent=512, d_rope=64, dtype="bf16",
                 backend="auto", context=None):
        self.num_heads = int(num_heads)
        self.softmax_scale = float(softmax_scale)
        self.d_latent, self.d_rope = int(d_latent), int(d_rope)
        self.dtype = dtype_name(dtype)
        self.backend = backend
        self.context = context
        self._plan = None
        self._dev = {}

    # -- plan ----------------------------------------------------------------------------------

    def plan(self, prefix_lens, q_lens, *, max_pages=None, device=None):
        """Schedule a batch shape.

        prefix_lens  [B] host ints: KV rows before the draft (SGLang's seq_lens in
                     target-verify; pass seq_lens_cpu: a CUDA tensor would be synchronized)
        q_lens       draft nodes per request: an int (num_draft_tokens) or [B] ints
        max_pages    page-table width; default the longest prefix + draft
        device       the CUDA device runs will use (torch.device, "cuda:0", int): uploads the
                     index tables and the workspace now, so the first run can be captured
        Returns the underlying mlaverify.Plan.
        """
        prefix = host_int32("prefix_lens", prefix_lens)
        if prefix.ndim != 1:
            raise invalid("prefix_lens must be 1-D [B]")
        B = prefix.shape[0]
        if np.ndim(q_lens) == 0:
            ql = np.full(B, int(q_lens), dtype=np.int32)
        else:
            ql = host_int32("q_lens", q_lens, shape=(B,))
        if np.any(prefix < 0) or np.any(ql < 0):
            raise invalid("prefix_lens and q_lens must be >= 0")
        kv = (prefix.astype(np.int64) + ql).astype(np.int32)
        indptr = np.zeros(B + 1, dtype=np.int32)
        indptr[1:] = np.cumsum(ql)
        if self._plan is not None:
            self._plan.close()
            self._plan = None
        self._dev = {}
        problem = Problem(num_heads=self.num_heads, q_indptr=indptr, kv_lens=kv,
                          softmax_scale=self.softmax_scale, d_latent=self.d_latent,
                          d_rope=self.d_rope, dtype=self.dtype, page_size=1,
                          max_pages=max_pages)
        self._plan = Plan(problem, backend=self.backend, context=self.context, device=device)
        T, maxq = problem.num_tokens, max(problem.max_q_len, 1)
        self.prefix, self.q_lens, self.kv_lens, self.q_indptr = prefix, ql, kv, indptr
        # host index tables: everything that depends only on the lengths
        rows = np.repeat(np.arange(B), ql)                      # request of each query row
        node = np.arange(T) - indptr[rows]                      # local index of each row
        k = np.arange(maxq)
        valid = k[None, :] < ql[rows][:, None]                  # [T, maxq]
        full_off = np.zeros(B + 1, dtype=np.int64)
        full_off[1:] = np.cumsum(ql.astype(np.int64) * kv)
        full_idx = (full_off[rows] + node.astype(np.int64) * kv[rows] + prefix[rows])[:, None] + k
        qlen_off = np.zeros(B + 1, dtype=np.int64)
        qlen_off[1:] = np.cumsum(ql.astype(np.int64) * ql)
        qlen_idx = (qlen_off[rows] + node.astype(np.int64) * ql[rows])[:, None] + k
        self._host = {
            "prefix": prefix.astype(np.int64)[:, None],          # [B, 1]
            "kv": kv.astype(np.int64)[:, None],                  # [B, 1]
            "draft_base": (indptr[:-1].astype(np.int64) - prefix)[:, None],  # [B, 1]
            "cols": np.arange(problem.max_pages, dtype=np.int64)[None, :],   # [1, P]
            "valid": valid,
            "full_idx": np.where(valid, full_idx, 0),
            "qlen_idx": np.where(valid, qlen_idx, 0),
            "shifts": np.arange(32, dtype=np.int64),
        }
        self._full_size = int(full_off[-1])
        self._qlen_size = int(qlen_off[-1])
        if device is not None:
            torch = torch_module()
            self._tables(torch.device(device) if not isinstance(device, int)
                         else torch.device("cuda", device))
        return self._plan

    @property
    def problem(self):
        return self._need_plan().problem

    def _need_plan(self):
        if self._plan is None:
            raise invalid("call plan(prefix_lens, q_lens) before run")
        return self._plan

    def _tables(self, device):
        """The index tables as torch tensors on `device` (uploaded once per device)."""
        torch = torch_module()
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        key = str(device)
        if key not in self._dev:
            if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise invalid("plan(..., device=...) must upload the index tables before a "
                              "CUDA graph capture")
            self._dev[key] = {k: torch.from_numpy(np.ascontiguousarray(v)).to(device)
                              for k, v in self._host.items()}
        return self._dev[key]

    # -- inputs to the library's form ----------------------------------------------------------

    def page_table(self, kv_indptr, kv_indices, out_cache_loc=None):
        """[B, max_pages] int32 page table (slot ids) from the gather lists, on their device."""
        p = self._need_plan().problem
        if is_torch(kv_indices):
            torch = torch_module()
            t = self._tables(kv_indices.device)
            start = kv_indptr[:-1].to(torch.int64)[:, None]
            j = t["cols"]
            n = kv_indices.shape[0]
            idx = (start + j).clamp_(0, max(n - 1, 0))
            g = kv_indices[idx] if n else torch.zeros_like(idx)
            if out_cache_loc is not None:
                m = out_cache_loc.shape[0]
                d_idx = (t["draft_base"] + j).clamp_(0, max(m - 1, 0))
                d = out_cache_loc[d_idx] if m else torch.zeros_like(d_idx)
                g = torch.where(j < t["prefix"], g, d)
            return torch.where(j < t["kv"], g, torch.zeros_like(g)).to(torch.int32)
        h = self._host
        kv_indptr = np.asarray(kv_indptr).astype(np.int64)
        kv_indices = np.asarray(kv_indices)
        if kv_indptr.shape != (p.batch + 1,):
            raise invalid("kv_indptr has shape %s, expected [%d]" % (list(kv_indptr.shape),
                                                                     p.batch + 1))
        j = h["cols"]
        n = kv_indices.shape[0]
        g = kv_indices[np.clip(kv_indptr[:-1, None] + j, 0, max(n - 1, 0))] if n else \
            np.zeros((p.batch, j.shape[1]), np.int64)
        if out_cache_loc is not None:
            loc = np.asarray(out_cache_loc)
            m = loc.shape[0]
            d = loc[np.clip(h["draft_base"] + j, 0, max(m - 1, 0))] if m else np.zeros_like(g)
            g = np.where(j < h["prefix"], g, d)
        return np.ascontiguousarray(np.where(j < h["kv"], g, 0), dtype=np.int32)

    def tree_mask(self, custom_mask):
        """The library's packed [T, words] mask (int32 for torch, uint32 for numpy) from any
        of SGLang's mask modes (see the module doc), or None for None."""
        if custom_mask is None:
            return None
        p = self._need_plan().problem
        T, words = p.num_tokens, p.mask_words
        dt = str(custom_mask.dtype).replace("torch.", "")
        shape = tuple(custom_mask.shape)
        torch_in = is_torch(custom_mask)
        if dt == "bool":
            n = int(np.prod(shape)) if shape else 0
            if len(shape) == 2 and shape[0] == T:
                vis = custom_mask[:, :p.max_q_len]
                return self._pack(vis, torch_in, custom_mask)
            if len(shape) != 1:
                raise invalid("a bool custom_mask must be flat (FULL_MASK or QLEN_ONLY) or "
                              "[T, max_q_len], not %s" % list(shape))
            if n == self._full_size:
                key = "full_idx"
            elif n == self._qlen_size:
                key = "qlen_idx"
            else:
                raise invalid(
                    "custom_mask has %d entries: neither FULL_MASK (sum q_len * (prefix + "
                    "q_len) = %d) nor QLEN_ONLY (sum q_len^2 = %d) for the planned lengths"
                    % (n, self._full_size, self._qlen_size))
            if torch_in:
                t = self._tables(custom_mask.device)
                vis = custom_mask[t[key]] & t["valid"]
            else:
                vis = np.asarray(custom_mask)[self._host[key]] & self._host["valid"]
            return self._pack(vis, torch_in, custom_mask)
        # bit-packed
        if len(shape) == 2 and shape == (T, words) and dt in ("int32", "uint32"):
            if torch_in:
                return custom_mask if dt == "int32" else custom_mask.view(
                    torch_module().int32)
            return np.ascontiguousarray(custom_mask).view(np.uint32)
        if len(shape) == 1 and shape[0] == T and dt in BITPACKED_DTYPES:
            if words != 1:
                raise invalid("a [T] bit-packed mask holds 32 nodes at most; this batch has "
                              "max_q_len %d" % p.max_q_len)
            return bitpacked_to_words(custom_mask)
        raise invalid("custom_mask of dtype %s and shape %s is none of SGLang's mask modes "
                      "(bool FULL_MASK / QLEN_ONLY, [T] bit-packed) nor a packed [T, %d] mask"
                      % (dt, list(shape), words))

    def _pack(self, vis, torch_in, like):
        p = self._plan.problem
        words = p.mask_words
        if not torch_in:
            from .tree import pack_mask
            return pack_mask(np.asarray(vis), words=words)
        return pack_visible_torch(vis, words, self._tables(like.device)["shifts"])

    # -- run -----------------------------------------------------------------------------------

    def run(self, q, kv_buffer, *, kv_indptr=None, kv_indices=None, out_cache_loc=None,
            page_table=None, custom_mask=None, out=None, lse=None, stream=None):
        """Verify attention for the planned batch; returns (out [T, H, Dl], lse [T, H]).
        Give kv_indptr + kv_indices (+ out_cache_loc when they cover the prefix only) or
        page_table; see the module doc for every input."""
        plan = self._need_plan()
        p = plan.problem
        q = self._as_3d("q", q, (p.num_tokens, p.num_heads, p.width))
        kv_buffer = self._as_pool(kv_buffer, p.width)
        ctx = None
        if is_torch(q) and q.device.type == "cuda" and stream is not None:
            torch = torch_module()
            s = stream if not isinstance(stream, int) else torch.cuda.ExternalStream(stream)
            ctx = torch.cuda.stream(s)  # the gathers below go on the run's stream too
        if ctx is not None:
            with ctx:
                pt, mask = self._inputs(kv_indptr, kv_indices, out_cache_loc, page_table,
                                        custom_mask)
        else:
            pt, mask = self._inputs(kv_indptr, kv_indices, out_cache_loc, page_table,
                                    custom_mask)
        return plan.run(q, kv_buffer, pt, mask, out=out, lse=lse, stream=stream)

    def _inputs(self, kv_indptr, kv_indices, out_cache_loc, page_table, custom_mask):
        if page_table is None:
            if kv_indptr is None or kv_indices is None:
                raise invalid("give kv_indptr and kv_indices (and out_cache_loc if they cover "
                              "the prefix only), or page_table")
            page_table = self.page_table(kv_indptr, kv_indices, out_cache_loc)
        elif kv_indptr is not None or kv_indices is not None or out_cache_loc is not None:
            raise invalid("give page_table or kv_indptr/kv_indices/out_cache_loc, not both")
        return page_table, self.tree_mask(custom_mask)

    @staticmethod
    def _as_3d(name, x, shape):
        if tuple(x.shape) == shape:
            return x
        if len(x.shape) == 2 and tuple(x.shape) == (shape[0], shape[1] * shape[2]):
            return x.reshape(shape)
        raise invalid("%s has shape %s, expected %s or [T, H * W]"
                      % (name, list(x.shape), list(shape)))

    @staticmethod
    def _as_pool(kv, width):
        if len(kv.shape) == 3 and kv.shape[1] == 1 and kv.shape[2] == width:
            return kv
        if len(kv.shape) == 2 and kv.shape[1] == width:
            return kv.reshape(kv.shape[0], 1, width)
        raise invalid("kv_buffer has shape %s, expected [pool, 1, %d] or [pool, %d]"
                      % (list(kv.shape), width, width))

    # -- capture -------------------------------------------------------------------------------

    def capture(self, path, q, kv_buffer, *, kv_indptr=None, kv_indices=None,
                out_cache_loc=None, page_table=None, custom_mask=None, **kwargs):
        """Write this step's inputs as a golden bundle (mlaverify.capture_bundle): the used
        pool rows only, the mask turned back into tree parents. Synchronizes; keyword
        arguments (draft_tokens, metadata, vocab...) go to capture_bundle."""
        from .bundle import capture_bundle
        p = self._need_plan().problem
        pt, mask = self._inputs(kv_indptr, kv_indices, out_cache_loc, page_table, custom_mask)
        return capture_bundle(
            path, q=self._as_3d("q", q, (p.num_tokens, p.num_heads, p.width)),
            kv_cache=self._as_pool(kv_buffer, p.width), page_table=pt, q_indptr=p.q_indptr,
            kv_lens=p.kv_lens, softmax_scale=p.softmax_scale, tree_mask=mask,
            d_latent=p.d_latent, dtype=p.dtype, **kwargs)

    def close(self):
        if self._plan is not None:
            self._plan.close()
            self._plan = None
        self._dev = {}
