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
kernel (capturable); a request they break is skipped and ``step_status()`` names it
(``refused_request()``: its index as an int). CPU plans take host lengths only; CUDA plans take
CUDA tensors only. The shape's arguments, kv_dtype, kv_scale and every run's tensors follow
Plan's rules (mlaverify.api: shape_fields, kv_scale_arg, check_run_tensors).
"""
from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _lib
from ._arrays import as_int, host_int32, is_torch, torch_module, wrap
from .api import (MEM_DEVICE, MEM_HOST, Context, PlanCore, Tensor, device_workspace,
                  host_workspace, kv_scale_arg, no_cuda_in_torch, np_ptr, problem_struct,
                  run_method, shape_fields, tree_mask_words)
from .errors import ERR_INVALID_ARG, StepStatusError, check, invalid

_I32_MIN, _I32_MAX = -2**31, 2**31 - 1

_NP_I32 = np.dtype(np.int32)


def int32_arg(name: str, value: Any, lo: int = _I32_MIN, hi: int = _I32_MAX) -> int:
    """`value` as a Python int, checked to be an integer (as_int: no bool, float or string)
    in [lo, hi] (int32 by default) before it reaches ctypes (which would wrap it silently)."""
    iv = as_int(name, value)
    if iv < lo or iv > hi:
        raise invalid("%s = %d is outside [%d, %d]" % (name, iv, lo, hi))
    return iv


def _host_lengths(name, x):
    """(object to keep alive, pointer, shape) of host int32 lengths: an int32 C-contiguous numpy
    array or CPU torch tensor as it is (nothing to check: every value fits), anything else
    through host_int32 (range-checked, converted)."""
    if type(x) is np.ndarray:
        if x.dtype is _NP_I32 and x.flags.c_contiguous and x.flags.aligned:
            return x, np_ptr(x), x.shape
    elif is_torch(x):
        torch = torch_module()
        if x.dtype is torch.int32 and x.layout is torch.strided and x.is_contiguous() and \
                x.device.type == "cpu" and x.data_ptr() % 4 == 0:
            return x, x.data_ptr(), tuple(x.shape)
    a = host_int32(name, x)
    return a, a.ctypes.data, a.shape


def set_kv_scale(t: "_lib.MlavTensors", kv_scale: Any, device: Optional[int],
                 kv_dtype: str = "fp8_e4m3") -> bool:
    """Set mlav_tensors.kv_scale / kv_scale_ptr of the MlavTensors t by kv_scale_arg's rule (a
    number, or a 1-element float32 tensor in `device`'s memory, None: host) for a cache of
    `kv_dtype`; kv_scale None clears both where that rule allows it (a cache that is not FP8).
    Returns whether a scale is set."""
    if kv_scale is None and kv_dtype != "fp8_e4m3":
        t.kv_scale, t.kv_scale_ptr = 0.0, None
        return False
    t.kv_scale, t.kv_scale_ptr = kv_scale_arg(kv_scale, device, kv_dtype)
    return True


# plan ids for the torch custom op (torch_ops.py): id -> StepPlan, weakly held
_PLANS = weakref.WeakValueDictionary()
_IDS = itertools.count(1)


def plan_by_id(plan_id: int) -> "StepPlan":
    """The live StepPlan of an id (StepPlan.id), for the torch custom op."""
    p = _PLANS.get(int(plan_id))
    if p is None:
        raise invalid("no live StepPlan has id %d" % int(plan_id))
    return p


class StepPlan(PlanCore):
    """A plan for limits (mlav_plan_create_for_limits) with its workspace, allocated once: the
    binding's one plan (mlaverify.api.PlanCore) with the calls of engine steps.

    num_heads, softmax_scale, dtype ("bf16", "f16", "f32"), page_size, max_pages (the page
    table's row stride), d_latent (512), d_rope (64): the shape, as in Problem.
    max_batch, max_tokens, max_q_len, max_kv_len: the limits (struct mlav_limits).
    kv_dtype  None (the cache has `dtype`; also `dtype` said again, or 0) or "fp8_e4m3" (any
              name of mlaverify.api.FP8_NAMES, 3): an FP8 E4M3 KV cache (raw bytes: numpy /
              torch uint8, or torch.float8_e4m3fn) whose runs take kv_scale. Anything else
              (another dtype than q's) is refused, as by Plan.
    shard     None or (ranks, rank, stripe): a KV shard, as in Problem; the limits and every
              step's lengths stay global (max_pages: the rank's page table).
    backend   "auto", "cpu", "cuda", "cuda-naive", "reference"; ignored when `context` is
              given
    device    the CUDA device of a CUDA plan (int, "cuda:1", torch.device); default torch's
              current device. The workspace is then a torch uint8 tensor there.

    A CPU plan's workspace is a numpy array (``workspace``). It starts zeroed and holding an
    empty step (batch 0, written by the library at creation): step_status() is -1 and a run
    before the first update writes nothing. One StepPlan holds one step's schedule: streams
    that run different steps at once need one StepPlan each.
    """

    _what = "StepPlan"

    def __init__(self, num_heads: int, softmax_scale: float, dtype: Any, page_size: int,
                 max_pages: int, max_batch: int, max_tokens: int, max_q_len: int,
                 max_kv_len: int, d_latent: int = 512, d_rope: int = 64,
                 context: Optional[Context] = None, backend: Any = "auto", device: Any = None,
                 kv_dtype: Any = None, shard: Any = None) -> None:
        # the shape's rule is Problem's (mlaverify.api.shape_fields): one check for both
        f = shape_fields(num_heads=num_heads, softmax_scale=softmax_scale, dtype=dtype,
                         page_size=page_size, max_pages=max_pages, d_latent=d_latent,
                         d_rope=d_rope, kv_dtype=kv_dtype, shard=shard)
        self.shard = f["shard"]
        self.num_heads, self.d_latent, self.d_rope = f["num_heads"], f["d_latent"], f["d_rope"]
        self.page_size, self.max_pages = f["page_size"], f["max_pages"]
        self.softmax_scale, self.dtype, self.kv_dtype = (f["softmax_scale"], f["dtype"],
                                                         f["kv_dtype"])
        self.width = self.d_latent + self.d_rope
        lim = _lib.MlavLimits(
            max_batch=int32_arg("max_batch", max_batch),
            max_tokens=int32_arg("max_tokens", max_tokens),
            max_q_len=int32_arg("max_q_len", max_q_len),
            max_kv_len=int32_arg("max_kv_len", max_kv_len))
        self._bufs = {}
        self._fbufs = {}
        torch = torch_module()
        lib = _lib.load()
        self._make(lib.mlav_plan_create_for_limits,
                   (ctypes.byref(problem_struct(f)), ctypes.byref(lim)), context, backend, device)
        h = self._h
        got = _lib.MlavLimits()
        check(lib.mlav_plan_limits(h, ctypes.byref(got)))
        self._limits = {f: int(getattr(got, f)) for f, _ in _lib.MlavLimits._fields_}
        self.mask_words = tree_mask_words(self._limits["max_q_len"])
        if self.workspace_memory == "device":
            if torch is None:
                self.close()
                raise invalid("a %s plan for limits keeps its workspace in device memory: "
                              "import torch (with CUDA) first" % self.backend)
            if not torch.cuda.is_available():
                self.close()
                raise no_cuda_in_torch("a %s plan for limits (its workspace is device memory)"
                                       % self.backend)
            if self._device is None:
                self._device = torch.cuda.current_device()
            if torch.cuda.is_current_stream_capturing():
                self.close()
                raise invalid("create a StepPlan outside CUDA graph capture")
            self.workspace = device_workspace(self.workspace_bytes, self._device)
            self._ws_ptr = self.workspace.data_ptr()
        else:
            self._device = None
            self.workspace = host_workspace(self.workspace_bytes)
            self._ws_ptr = self.workspace.ctypes.data
        self.id = next(_IDS)
        _PLANS[self.id] = self
        # the last update's lengths struct (kept so the pointers outlive the call)
        self._lengths = _lib.MlavLengths()
        self._lengths_ref = ctypes.byref(self._lengths)
        # the run (PlanCore._run) on tensors of the limits' shapes, in the plan's place
        self._update_fn = lib.mlav_plan_update
        self._run_setup(self, self._limits["max_tokens"], self._limits["max_batch"],
                        self.mask_words, True, self._device is None)
        if self._device is not None:
            C = torch._C
            self._get_device = getattr(C, "_cuda_getDevice", None) or torch.cuda.current_device
            raw = getattr(C, "_cuda_getCurrentRawStream", None)
            self._raw_stream = raw if raw is not None else (
                lambda d: torch.cuda.current_stream(d).cuda_stream)
        # the workspace starts zeroed and holding an empty step (batch 0) written by the
        # library, so step_status() says -1 and a run before the first update writes nothing,
        # rather than either reading whatever the allocation held
        self.update(np.zeros(1, np.int32), np.zeros(0, np.int32), batch=0)
        if self._device is not None:
            torch.cuda.current_stream(self._device).synchronize()

    # -- properties ----------------------------------------------------------------------------

    @property
    def limits(self) -> Dict[str, int]:
        """dict max_batch, max_tokens, max_q_len, max_kv_len (read back from the library)."""
        return dict(self._limits)

    @property
    def device(self) -> Optional[int]:
        """The CUDA device index of a CUDA plan, None for a CPU plan."""
        return self._device

    def _stream(self):
        if self._device is None:
            return None
        return self._raw_stream(self._device)

    def _call(self, fn, ref, device=None, stream=None):
        """fn(plan, ref, workspace, bytes, stream): on a CUDA plan on its device (switched only
        when it is not current) and torch's current stream there; also PlanCore._run's hook,
        whose tensors are in the plan's place (`device`) and whose stream is torch's current
        one (`stream` None)."""
        if stream is not None:
            raise invalid("StepPlan.run takes no stream: it runs on torch's current stream "
                          "(select one with torch.cuda.stream(s))")
        h = self._h
        if h is None:
            raise invalid("the %s is closed" % self._what)
        d = self._device
        if d is None:
            return fn(h, ref, self._ws_ptr, self.workspace_bytes, None)
        if self._get_device() == d:
            return fn(h, ref, self._ws_ptr, self.workspace_bytes, self._raw_stream(d))
        with torch_module().cuda.device(d):
            return fn(h, ref, self._ws_ptr, self.workspace_bytes, self._raw_stream(d))

    # -- update --------------------------------------------------------------------------------

    def update(self, q_indptr: Any, kv_lens: Any, batch: Optional[int] = None) -> None:
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
        L = self._lengths
        if type(kv_lens) is not np.ndarray and is_torch(kv_lens) and kv_lens.is_cuda or \
                type(q_indptr) is not np.ndarray and is_torch(q_indptr) and q_indptr.is_cuda:
            ptrs = self._fast_device_lengths(q_indptr, kv_lens, batch)
            if ptrs is None:
                ptrs = self._device_lengths(q_indptr, kv_lens, batch)
            L.memory, L.batch, L.q_indptr, L.kv_lens = MEM_DEVICE, ptrs[0], ptrs[1], ptrs[2]
            self._keep = (q_indptr, kv_lens)
            st = self._call(self._update_fn, self._lengths_ref)
            if st:
                check(st)
            return
        qi, qi_ptr, qi_shape = _host_lengths("q_indptr", q_indptr)
        kv, kv_ptr, kv_shape = _host_lengths("kv_lens", kv_lens)
        if len(qi_shape) != 1 or len(kv_shape) != 1:
            raise invalid("q_indptr and kv_lens must be 1-D, not %s and %s"
                          % (list(qi_shape), list(kv_shape)))
        n = kv_shape[0] if batch is None else batch
        if type(n) is not int or n < 0 or n > self._limits["max_batch"]:
            n = int32_arg("batch", n, 0, self._limits["max_batch"])
        if qi_shape[0] < n + 1 or kv_shape[0] < n:
            raise invalid("batch = %d needs q_indptr [>= %d] and kv_lens [>= %d], not %s and "
                          "%s" % (n, n + 1, n, list(qi_shape), list(kv_shape)))
        L.memory, L.batch, L.q_indptr, L.kv_lens = MEM_HOST, n, qi_ptr, kv_ptr
        self._keep = (qi, kv)
        st = self._call(self._update_fn, self._lengths_ref)
        if st:
            check(st)

    def _fast_device_lengths(self, q_indptr, kv_lens, batch):
        """(batch, q_indptr pointer, kv_lens pointer) of int32 contiguous 1-D CUDA tensors on
        the plan's device, or None: then _device_lengths says what is wrong."""
        torch = torch_module()
        dev = self._tdevice()
        i32 = torch.int32
        if not (isinstance(q_indptr, torch.Tensor) and isinstance(kv_lens, torch.Tensor) and
                q_indptr.dtype is i32 and kv_lens.dtype is i32 and
                q_indptr.device == dev and kv_lens.device == dev and
                q_indptr.layout is torch.strided and kv_lens.layout is torch.strided and
                q_indptr.dim() == 1 and kv_lens.dim() == 1 and
                q_indptr.is_contiguous() and kv_lens.is_contiguous()):
            return None
        nq, nk = q_indptr.shape[0], kv_lens.shape[0]
        n = nk if batch is None else batch
        if type(n) is not int or n < 0 or n > self._limits["max_batch"] or nq < n + 1 or nk < n:
            return None
        return n, q_indptr.data_ptr(), kv_lens.data_ptr()

    def _device_lengths(self, q_indptr, kv_lens, batch):
        """The full checks of device lengths; raises what is wrong."""
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
        return n, a_qi.ptr, a_kv.ptr

    def _step_word(self) -> Tuple[int, int]:
        """(mlav_status, bad_request) of mlav_plan_step_status on this plan's workspace; the
        library's sentence is then its last error on this thread."""
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
        return st, int(bad.value)

    def step_status(self) -> int:
        """-1 when the last update took every request (a fresh StepPlan holds an empty step:
        -1 too). Otherwise raises StepStatusError (an InvalidArgumentError) with the library's
        sentence naming the first refused request, and its index as the int
        ``e.bad_request`` (the step's batch when q_indptr itself was refused: nothing ran).
        refused_request() gives that int without raising. On CUDA it copies 8 bytes from the
        workspace and synchronizes the current stream: a check for after the step, not for
        the hot loop."""
        st, bad = self._step_word()
        if st == ERR_INVALID_ARG and 0 <= bad <= self._limits["max_batch"]:
            raise StepStatusError(_lib.text(_lib.load().mlav_last_error(None)), bad)
        check(st)
        return -1

    def refused_request(self) -> int:
        """The last update's refused request as an int: -1 when every request was taken, else
        the index of the first refused one, or the step's batch when q_indptr itself was
        refused (nothing ran). Never raises for a refusal (step_status() does, with the
        sentence); other failures (a closed plan) raise as usual. Synchronizes as
        step_status() does."""
        st, bad = self._step_word()
        if st == ERR_INVALID_ARG and 0 <= bad <= self._limits["max_batch"]:
            return bad
        check(st)
        return -1

    # -- run -----------------------------------------------------------------------------------

    def output_buffers(self, like: Tensor) -> Tuple[Tensor, Tensor]:
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
        if a.device == self._device:
            self._fbufs[a.obj.dtype] = b
        return b

    # run(q, kv_cache, page_table, tree_mask=None, out=None, lse=None, kv_scale=None,
    #     page_table_rows=None): the binding's one run body (PlanCore._run), here without the
    #     `stream` of Plan.run (refused: a StepPlan follows torch's current stream)
    run = run_method("""Run the last update's step on one layer's tensors; returns (out, lse).

        q          [max_tokens, H, Dl+Dr] in the plan's dtype (numpy uint16 bits for bf16)
        kv_cache   [num_pages, page_size, Dl+Dr] (kv_dtype "fp8_e4m3": uint8 bytes, or torch
                   float8_e4m3fn)
        page_table [max_batch, max_pages] int32; with page_table_rows [num_rows, max_pages]
                   (num_rows >= 1): a table shared by the requests
        tree_mask  [max_tokens, words] uint32/int32, or None (a causal chain)
        out, lse   [max_tokens, H, Dl] / [max_tokens, H] float32, or None: the StepPlan's own
                   buffers (allocated once per kind of tensor, reused by every run: copy what
                   you keep). Rows past the step's tokens are left as they were.
        kv_scale   an FP8 cache's per-tensor scale, required there and refused on any other
                   plan: a number, or a 1-element float32 tensor in the tensors' memory (read
                   by the run itself: capturable, no host read); the rule of
                   mlaverify.api.kv_scale_arg, Plan.run's
        page_table_rows  None (request b's row of page_table is row b), or [max_batch] int32
                   in the tensors' memory (the limits' shape, like page_table's rows: a fixed
                   buffer a captured graph reads at replay): request b's row is
                   page_table_rows[b], each of the step's in [0, num_rows); entries past the
                   step's batch are not read
        All host (numpy / CPU torch) for a CPU plan, all CUDA on the plan's device for a CUDA
        plan (asynchronous on the current torch stream, capturable once out/lse exist; to
        run on another stream, make it current: torch.cuda.stream(s)).
        """)

    def _run_ref(self, ref):
        """mlav_run on a prebuilt struct (byref of an MlavTensors whose pointers the caller
        checked against this plan's limits): the SGLang backend's per-layer path."""
        with self._lock:
            st = self._call(self._run_fn, ref)
        if st:
            check(st)

    # -- the run's hooks (PlanCore._run) -------------------------------------------------------

    def _check_place(self, a_q) -> None:
        if a_q.device != self._device:
            raise invalid("this %s plan for limits takes %s tensors; q is on %s" % (
                self.backend, "host" if self._device is None else "cuda:%d" % self._device,
                a_q.where))

    def _own_outputs(self, a_q, out, lse, stream):
        """out / lse None: the plan's own buffers (output_buffers)."""
        o, l = self.output_buffers(a_q)
        return (o if out is None else out), (l if lse is None else lse)

    # -- lifetime ------------------------------------------------------------------------------

    def _release(self) -> None:
        self._bufs = {}
        self._fbufs = {}

    def __repr__(self) -> str:
        return ("StepPlan(H=%d, Dl=%d, Dr=%d, %s, page_size=%d, max_pages=%d, limits=%s, "
                "backend=%s, workspace=%d bytes %s)"
                % (self.num_heads, self.d_latent, self.d_rope, self.dtype, self.page_size,
                   self.max_pages, self._limits, self.backend, self.workspace_bytes,
                   self.workspace_memory))
