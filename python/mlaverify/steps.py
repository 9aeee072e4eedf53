"""Engine steps: one plan for the engine's lifetime, lengths that change at every step.

    plan = StepPlan(num_heads=H, softmax_scale=s, dtype="bf16", page_size=1, max_pages=P,
                    max_batch=64, max_tokens=64 * 8, max_q_len=8, max_kv_len=P,
                    device="cuda:0")                       # once: plan and workspace
    # every step (CUDA: capture these once into a graph and replay it)
    plan.update(q_indptr, kv_lens)                         # int32 CUDA tensors: no host read
    for layer in layers:
        out, lse = plan.run(q[layer], kv_cache[layer], page_table, tree_mask)

The C calls are mlav_plan_create_for_limits, mlav_plan_update, mlav_run and
mlav_plan_step_status (include/mlaverify.h, "Engine steps"). Every buffer has the limits' shape:
q [max_tokens, H, Dl+Dr], page_table [max_batch, max_pages], tree_mask [max_tokens, words] with
words = ceil(max_q_len / 32), out [max_tokens, H, Dl], lse [max_tokens, H]; rows past the
step's tokens are not written. Requests with q_len 0 are padding.

Lengths on the host (lists, numpy, CPU torch) are checked at once and raise
InvalidArgumentError with the library's sentence. Lengths in CUDA tensors are read by a device
kernel (capturable); a request they break is skipped and ``step_status()`` names it.
CPU plans take host lengths only; CUDA plans take CUDA tensors only.
"""
import ctypes
import itertools
import operator
import threading
import weakref

import numpy as np

from . import _lib
from ._arrays import host_int32, is_torch, torch_module, wrap
from .api import (_BACKEND_NAMES, _ELEMENTS, DTYPES, MEM_DEVICE, MEM_HOST, Context,
                  _cuda_index, dtype_name, tree_mask_words)
from .errors import check, invalid

_ALIGN = 256
_I32_MIN, _I32_MAX = -2**31, 2**31 - 1


def int32_arg(name, value, lo=_I32_MIN, hi=_I32_MAX):
    """`value` as a Python int, checked to be an integer in [lo, hi] (int32 by default) before
    it reaches ctypes (which would wrap it silently)."""
    if isinstance(value, bool):
        raise invalid("%s = %r must be an integer" % (name, value))
    try:
        iv = operator.index(value)
    except TypeError:
        raise invalid("%s = %r must be an integer" % (name, value)) from None
    if iv < lo or iv > hi:
        raise invalid("%s = %d is outside [%d, %d]" % (name, iv, lo, hi))
    return iv


def _host_lengths(name, x):
    """A host int32 array of lengths: an int32 C-contiguous numpy array as it is (nothing to
    check: every value fits), anything else through host_int32 (range-checked, converted)."""
    if type(x) is np.ndarray and x.dtype == np.int32 and x.flags.c_contiguous:
        return x
    return host_int32(name, x)


# plan ids for the torch custom op (torch_ops.py): id -> StepPlan, weakly held
_PLANS = weakref.WeakValueDictionary()
_IDS = itertools.count(1)


def plan_by_id(plan_id):
    """The live StepPlan of an id (StepPlan.id), for the torch custom op."""
    p = _PLANS.get(int(plan_id))
    if p is None:
        raise invalid("no live StepPlan has id %d" % int(plan_id))
    return p


class StepPlan:
    """A plan for limits (mlav_plan_create_for_limits) with its workspace, allocated once.

    num_heads, softmax_scale, dtype ("bf16", "f16", "f32"), page_size, max_pages (the page
    table's row stride), d_latent (512), d_rope (64): the shape, as in Problem.
    max_batch, max_tokens, max_q_len, max_kv_len: the limits (struct mlav_limits).
    backend   "auto", "cpu", "cuda", "reference" (cuda-naive has no plan for limits);
              ignored when `context` is given
    device    the CUDA device of a CUDA plan (int, "cuda:1", torch.device); default torch's
              current device. The workspace is then a torch uint8 tensor there.

    A CPU plan's workspace is a numpy array (``workspace``). One StepPlan holds one step's
    schedule: streams that run different steps at once need one StepPlan each.
    """

    def __init__(self, num_heads, softmax_scale, dtype, page_size, max_pages, max_batch,
                 max_tokens, max_q_len, max_kv_len, d_latent=512, d_rope=64, context=None,
                 backend="auto", device=None):
        self.num_heads = int32_arg("num_heads", num_heads)
        self.d_latent = int32_arg("d_latent", d_latent)
        self.d_rope = int32_arg("d_rope", d_rope)
        self.page_size = int32_arg("page_size", page_size)
        self.max_pages = int32_arg("max_pages", max_pages)
        self.softmax_scale = float(softmax_scale)
        self.dtype = dtype_name(dtype)
        self.width = self.d_latent + self.d_rope
        lim = _lib.MlavLimits(
            max_batch=int32_arg("max_batch", max_batch),
            max_tokens=int32_arg("max_tokens", max_tokens),
            max_q_len=int32_arg("max_q_len", max_q_len),
            max_kv_len=int32_arg("max_kv_len", max_kv_len))
        self._h = None
        self._ctx = context if context is not None else Context(backend)
        self._lock = threading.Lock()
        self._bufs = {}
        shape = _lib.MlavProblem(
            num_heads=self.num_heads, d_latent=self.d_latent, d_rope=self.d_rope,
            softmax_scale=self.softmax_scale, dtype=DTYPES[self.dtype],
            page_size=self.page_size, batch=0, q_indptr=None, kv_lens=None,
            max_pages=self.max_pages)
        lib = _lib.load()
        torch = torch_module()
        self._device = _cuda_index(device) if device is not None else None
        h = ctypes.c_void_p()
        with self._ctx._lock:
            if self._device is not None:
                with torch.cuda.device(self._device):
                    check(lib.mlav_plan_create_for_limits(self._ctx._handle(), ctypes.byref(shape),
                                                          ctypes.byref(lim), ctypes.byref(h)))
            else:
                check(lib.mlav_plan_create_for_limits(self._ctx._handle(), ctypes.byref(shape),
                                                      ctypes.byref(lim), ctypes.byref(h)))
        self._h = h
        got = _lib.MlavLimits()
        check(lib.mlav_plan_limits(h, ctypes.byref(got)))
        self._limits = {f: int(getattr(got, f)) for f, _ in _lib.MlavLimits._fields_}
        self.mask_words = tree_mask_words(self._limits["max_q_len"])
        self.backend = _BACKEND_NAMES[lib.mlav_plan_backend(h)]
        self.workspace_bytes = int(lib.mlav_plan_workspace_bytes(h))
        self.workspace_memory = "device" if lib.mlav_plan_workspace_memory(h) else "host"
        if self.workspace_memory == "device":
            if torch is None or not torch.cuda.is_available():
                self.close()
                raise invalid("a %s plan for limits keeps its workspace in device memory: "
                              "import torch (with CUDA) first" % self.backend)
            if self._device is None:
                self._device = torch.cuda.current_device()
            if torch.cuda.is_current_stream_capturing():
                self.close()
                raise invalid("create a StepPlan outside CUDA graph capture")
            n = max(self.workspace_bytes, 1)
            with torch.cuda.device(self._device):
                buf = torch.empty(n + _ALIGN, dtype=torch.uint8,
                                  device=torch.device("cuda", self._device))
            off = (-buf.data_ptr()) % _ALIGN
            self.workspace = buf[off:off + n]
            self._ws_ptr = self.workspace.data_ptr()
        else:
            self._device = None
            n = max(self.workspace_bytes, 1)
            buf = np.empty(n + _ALIGN, dtype=np.uint8)
            off = (-buf.ctypes.data) % _ALIGN
            self.workspace = buf[off:off + n]
            self._ws_ptr = self.workspace.ctypes.data
        self.id = next(_IDS)
        _PLANS[self.id] = self
        # the last update's lengths struct (kept so the pointers outlive the call)
        self._lengths = _lib.MlavLengths()

    # -- properties ----------------------------------------------------------------------------

    @property
    def limits(self):
        """dict max_batch, max_tokens, max_q_len, max_kv_len (read back from the library)."""
        return dict(self._limits)

    @property
    def device(self):
        """The CUDA device index of a CUDA plan, None for a CPU plan."""
        return self._device

    def _handle(self):
        if self._h is None:
            raise invalid("the StepPlan is closed")
        return self._h

    def _stream(self):
        if self._device is None:
            return None
        return torch_module().cuda.current_stream(self._device).cuda_stream

    # -- update --------------------------------------------------------------------------------

    def update(self, q_indptr, kv_lens, batch=None):
        """Give the plan the next step's lengths.

        q_indptr  [batch+1] ints, kv_lens [batch] ints (longer arrays: the first batch(+1)
                  entries are used). Host lengths (lists, numpy, CPU torch) are checked at
                  once (InvalidArgumentError with the library's sentence). torch CUDA int32
                  tensors (contiguous, on the plan's device) are device lengths: nothing is
                  read on the host, the schedule is built on the current torch stream, the call
                  can be captured in a CUDA graph (the tensors' memory is what the graph reads
                  at replay: keep them fixed buffers).
        batch     requests in the step (a host int; a captured graph keeps it); default
                  len(kv_lens). Pad with q_len 0 requests.
        """
        lib = _lib.load()
        L = self._lengths
        if is_torch(kv_lens) and kv_lens.device.type == "cuda" or \
                is_torch(q_indptr) and q_indptr.device.type == "cuda":
            a_qi, a_kv = wrap("q_indptr", q_indptr), wrap("kv_lens", kv_lens)
            for a in (a_qi, a_kv):
                if a.device is None:
                    raise invalid("q_indptr is on %s and kv_lens on %s: give both as CUDA "
                                  "tensors or both on the host" % (a_qi.where, a_kv.where))
                if a.dtype != "int32":
                    raise invalid("%s has dtype %s; device lengths must be int32"
                                  % (a.name, a.dtype))
                if len(a.shape) != 1:
                    raise invalid("%s must be 1-D, not %s" % (a.name, list(a.shape)))
            if self._device is not None and (a_qi.device != self._device or
                                             a_kv.device != self._device):
                raise invalid("the lengths are on %s / %s but the plan is on cuda:%d"
                              % (a_qi.where, a_kv.where, self._device))
            n = a_kv.shape[0] if batch is None else batch
            n = int32_arg("batch", n, 0, self._limits["max_batch"])
            if a_qi.shape[0] < n + 1 or a_kv.shape[0] < n:
                raise invalid("batch = %d needs q_indptr [>= %d] and kv_lens [>= %d], not %s "
                              "and %s" % (n, n + 1, n, list(a_qi.shape), list(a_kv.shape)))
            L.memory, L.batch, L.q_indptr, L.kv_lens = MEM_DEVICE, n, a_qi.ptr, a_kv.ptr
            self._keep = (q_indptr, kv_lens)
            dev = self._device if self._device is not None else a_kv.device
            with torch_module().cuda.device(dev):
                check(lib.mlav_plan_update(self._handle(), ctypes.byref(L), self._ws_ptr,
                                           self.workspace_bytes, self._stream()))
            return
        qi = _host_lengths("q_indptr", q_indptr)
        kv = _host_lengths("kv_lens", kv_lens)
        if qi.ndim != 1 or kv.ndim != 1:
            raise invalid("q_indptr and kv_lens must be 1-D, not %s and %s"
                          % (list(qi.shape), list(kv.shape)))
        n = kv.shape[0] if batch is None else batch
        n = int32_arg("batch", n, 0, self._limits["max_batch"])
        if qi.shape[0] < n + 1 or kv.shape[0] < n:
            raise invalid("batch = %d needs q_indptr [>= %d] and kv_lens [>= %d], not %s and "
                          "%s" % (n, n + 1, n, list(qi.shape), list(kv.shape)))
        L.memory, L.batch, L.q_indptr, L.kv_lens = MEM_HOST, n, qi.ctypes.data, kv.ctypes.data
        self._keep = (qi, kv)
        if self._device is not None:
            with torch_module().cuda.device(self._device):
                check(lib.mlav_plan_update(self._handle(), ctypes.byref(L), self._ws_ptr,
                                           self.workspace_bytes, self._stream()))
        else:
            check(lib.mlav_plan_update(self._handle(), ctypes.byref(L), self._ws_ptr,
                                       self.workspace_bytes, None))

    def step_status(self):
        """-1 when the last update took every request; raises InvalidArgumentError with the
        library's sentence naming the first refused request otherwise. On CUDA it copies 4
        bytes and synchronizes the current stream: a check for after the step."""
        lib = _lib.load()
        bad = ctypes.c_int32(-1)
        if self._device is not None:
            with torch_module().cuda.device(self._device):
                st = lib.mlav_plan_step_status(self._handle(), self._ws_ptr,
                                               self.workspace_bytes, self._stream(),
                                               ctypes.byref(bad))
        else:
            st = lib.mlav_plan_step_status(self._handle(), self._ws_ptr, self.workspace_bytes,
                                           None, ctypes.byref(bad))
        check(st)
        return int(bad.value)

    # -- run -----------------------------------------------------------------------------------

    def output_buffers(self, like):
        """The StepPlan's own (out, lse) of the kind of `like` (numpy, CPU torch or CUDA torch),
        allocated once: [max_tokens, H, Dl] in q's dtype and [max_tokens, H] float32."""
        a = like if hasattr(like, "is_torch") else wrap("q", like)
        key = (a.is_torch, a.device, a.dtype)
        b = self._bufs.get(key)
        if b is None:
            T, H = self._limits["max_tokens"], self.num_heads
            if a.is_torch:
                torch = torch_module()
                if a.device is not None and torch.cuda.is_current_stream_capturing():
                    raise invalid("the StepPlan's out/lse would be allocated inside a CUDA graph "
                                  "capture: run once before capturing, or pass out= and lse=")
                dev = a.obj.device
                b = (torch.empty((T, H, self.d_latent), dtype=a.obj.dtype, device=dev),
                     torch.empty((T, H), dtype=torch.float32, device=dev))
            else:
                b = (np.empty((T, H, self.d_latent), dtype=np.dtype(a.dtype)),
                     np.empty((T, H), dtype=np.float32))
            self._bufs[key] = b
        return b

    def run(self, q, kv_cache, page_table, tree_mask=None, out=None, lse=None):
        """Run the last update's step on one layer's tensors; returns (out, lse).

        q          [max_tokens, H, Dl+Dr] in the plan's dtype (numpy uint16 bits for bf16)
        kv_cache   [num_pages, page_size, Dl+Dr]
        page_table [max_batch, max_pages] int32
        tree_mask  [max_tokens, words] uint32/int32, or None (a causal chain)
        out, lse   [max_tokens, H, Dl] / [max_tokens, H] float32, or None: the StepPlan's own
                   buffers (allocated once per kind of tensor, reused by every run: copy what
                   you keep). Rows past the step's tokens are left as they were.
        All host (numpy / CPU torch) for a CPU plan, all CUDA on the plan's device for a CUDA
        plan (asynchronous on the current torch stream, capturable once out/lse exist).
        """
        T, H, W, Dl = self._limits["max_tokens"], self.num_heads, self.width, self.d_latent
        a_q = wrap("q", q)
        a_kv = wrap("kv_cache", kv_cache)
        a_pt = wrap("page_table", page_table)
        a_m = wrap("tree_mask", tree_mask) if tree_mask is not None else None
        if out is None or lse is None:
            o, l = self.output_buffers(a_q)
            out = o if out is None else out
            lse = l if lse is None else lse
        a_out = wrap("out", out, writable=True)
        a_lse = wrap("lse", lse, writable=True)
        args = (a_q, a_kv, a_pt, a_m, a_out, a_lse)
        dev = a_q.device
        for a in args:
            if a is not None and a.device != dev:
                raise invalid("tensors are in different places: " + ", ".join(
                    "%s on %s" % (x.name, x.where) for x in args if x is not None))
        if dev != self._device:
            raise invalid("this %s plan for limits takes %s tensors; q is on %s" % (
                self.backend, "host" if self._device is None else "cuda:%d" % self._device,
                a_q.where))
        elems = _ELEMENTS[self.dtype]
        for a in (a_q, a_kv, a_out):
            if a.dtype not in elems:
                raise invalid("%s has dtype %s; the plan's dtype %s needs %s"
                              % (a.name, a.dtype, self.dtype, " or ".join(elems)))
        if a_pt.dtype != "int32":
            raise invalid("page_table has dtype %s; it must be int32" % a_pt.dtype)
        if a_m is not None and a_m.dtype not in ("uint32", "int32"):
            raise invalid("tree_mask has dtype %s; it must be uint32 or int32" % a_m.dtype)
        if a_lse.dtype != "float32":
            raise invalid("lse has dtype %s; it must be float32" % a_lse.dtype)
        for a, shape in ((a_q, (T, H, W)), (a_pt, (self._limits["max_batch"], self.max_pages)),
                         (a_m, (T, self.mask_words)), (a_out, (T, H, Dl)), (a_lse, (T, H))):
            if a is not None and a.shape != shape:
                raise invalid("%s has shape %s, expected %s (the limits' shape)"
                              % (a.name, list(a.shape), list(shape)))
        if len(a_kv.shape) != 3 or a_kv.shape[1:] != (self.page_size, W):
            raise invalid("kv_cache has shape %s, expected [num_pages, %d, %d]"
                          % (list(a_kv.shape), self.page_size, W))
        t = _lib.MlavTensors(
            memory=MEM_HOST if dev is None else MEM_DEVICE, q=a_q.ptr, kv_cache=a_kv.ptr,
            num_pages=a_kv.shape[0], page_table=a_pt.ptr,
            tree_mask=a_m.ptr if a_m is not None else None, out=a_out.ptr, lse=a_lse.ptr)
        lib = _lib.load()
        if dev is None:
            with self._lock:
                check(lib.mlav_run(self._handle(), ctypes.byref(t), self._ws_ptr,
                                   self.workspace_bytes, None))
        else:
            with torch_module().cuda.device(dev):
                check(lib.mlav_run(self._handle(), ctypes.byref(t), self._ws_ptr,
                                   self.workspace_bytes, self._stream()))
        return out, lse

    # -- lifetime ------------------------------------------------------------------------------

    def close(self):
        """Free the plan. A CUDA graph that captured its update or runs must be destroyed
        first."""
        h, self._h = getattr(self, "_h", None), None
        if h is not None and _lib._lib is not None:
            _lib._lib.mlav_plan_free(h)
        self._bufs = {}

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return ("StepPlan(H=%d, Dl=%d, Dr=%d, %s, page_size=%d, max_pages=%d, limits=%s, "
                "backend=%s, workspace=%d bytes %s)"
                % (self.num_heads, self.d_latent, self.d_rope, self.dtype, self.page_size,
                   self.max_pages, self._limits, self.backend, self.workspace_bytes,
                   self.workspace_memory))
