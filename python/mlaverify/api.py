"""Contexts, problems, plans and the one-shot verify: the C API's plan/run split in Python.

    ctx  = Context("auto")                       # CUDA if built in and a GPU is there, else CPU
    plan = Plan(num_heads=64, softmax_scale=s, dtype="bf16", page_size=1,
                q_indptr=[0, 9, 18], kv_lens=[1009, 209], context=ctx)
    out, lse = plan.run(q, kv_cache, page_table, tree_mask)

Tensors are numpy arrays (host memory) or torch tensors (CPU: host memory; CUDA: device memory
of their device). BF16 from numpy is a uint16 array of raw bits; the plan's dtype says "bf16".
An FP8 (E4M3) KV cache: ``kv_dtype="fp8_e4m3"`` on the plan, the cache as torch.float8_e4m3fn
or uint8 bytes (numpy has no fp8 dtype), and ``kv_scale=`` on the run (a KV element's value is
e4m3(byte) x kv_scale).
"""
from __future__ import annotations

import ctypes
import threading
import types
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from . import _lib
from ._arrays import c_int, empty_like_kind, host_int32, is_torch, torch_module, wrap
from .errors import ERR_NO_DEVICE, NoDeviceError, check, invalid

#: A tensor argument: a numpy array (host memory) or a torch tensor (CPU, or CUDA). Annotated
#: as Any: torch is optional and never imported by the package itself.
Tensor = Any

MEM_HOST = 0
MEM_DEVICE = 1

BACKENDS = {"auto": 0, "cpu": 1, "cuda": 2, "cuda-naive": 3, "reference": 4}
_BACKEND_NAMES = {v: k for k, v in BACKENDS.items()}

#: mlav_dtype values. "fp8_e4m3" is a KV cache dtype only (Problem's kv_dtype), never q's.
DTYPES = {"f32": 0, "bf16": 1, "f16": 2, "fp8_e4m3": 3}
_DTYPE_ALIASES = {
    "f32": "f32", "fp32": "f32", "float32": "f32", "float": "f32",
    "bf16": "bf16", "bfloat16": "bf16",
    "f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
}
#: Every name of the FP8 (E4M3) KV cache dtype, the one table the binding, the bundle writer and
#: the bundle CLI share: compared lowercase, after dropping a "torch." prefix (so
#: torch.float8_e4m3fn is one too); the mlav_dtype value 3 is one as well.
FP8_NAMES = ("fp8_e4m3", "fp8", "e4m3", "float8_e4m3fn", "f8_e4m3")
#: Element dtypes (numpy / torch names) a tensor of each dtype may have, the one table of the
#: binding's checks and fast paths: numpy has neither bfloat16 nor an fp8 type, so raw bits
#: (uint16) and bytes (uint8) stand in for them (the last name is numpy's)
ELEMENTS = {"f32": ("float32",), "f16": ("float16",), "bf16": ("bfloat16", "uint16"),
             "fp8_e4m3": ("float8_e4m3fn", "uint8")}
_ALIGN = 256

# the numpy element of each dtype: the last of ELEMENTS' names (numpy's own or its stand-in)
_NP_ELEMENT = {k: np.dtype(v[-1]) for k, v in ELEMENTS.items()}
_NP_I32, _NP_U32, _NP_F32 = np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.float32)
_from_buffer, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def np_ptr(a):
    """The data pointer of a C-contiguous numpy array: through the buffer protocol (a third of
    a.ctypes.data's time) when it is writable and not empty, else a.ctypes.data."""
    try:
        return _addressof(_from_buffer(a))
    except (TypeError, ValueError):
        return a.ctypes.data


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_fp8(dtype: Any) -> bool:
    """Whether `dtype` names the FP8 (E4M3) cache dtype: one of FP8_NAMES (any case, with or
    without "torch."), torch.float8_e4m3fn, or the mlav_dtype value 3."""
    if _is_int(dtype):
        return int(dtype) == DTYPES["fp8_e4m3"]
    if isinstance(dtype, (bool, np.bool_)):
        return False
    return str(dtype).replace("torch.", "").lower() in FP8_NAMES


def dtype_name(dtype: Any) -> str:
    """Canonical plan dtype ("f32", "bf16", "f16") of a name ("bfloat16", "fp16", ...), a
    mlav_dtype value, a numpy dtype (float32, float16) or a torch dtype."""
    if isinstance(dtype, (bool, np.bool_)):
        raise invalid("dtype = %r is not one of f32, bf16, f16" % (dtype,))
    if _is_int(dtype):
        for k, v in DTYPES.items():
            if v == int(dtype) and k != "fp8_e4m3":
                return k
        if int(dtype) == DTYPES["fp8_e4m3"]:
            raise invalid("dtype = 3 (fp8_e4m3) is not one of f32, bf16, f16: only the KV "
                          "cache may be FP8 (kv_dtype='fp8_e4m3')")
        raise invalid("dtype = %d is not a mlav_dtype (0 f32, 1 bf16, 2 f16)" % dtype)
    key = str(dtype).replace("torch.", "").lower()
    if key in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[key]
    if key in FP8_NAMES:
        raise invalid("dtype %r is not one of f32, bf16, f16: only the KV cache may be FP8 "
                      "(kv_dtype='fp8_e4m3')" % (dtype,))
    try:
        key = np.dtype(dtype).name
    except TypeError:
        key = None
    if key in ("float32", "float16"):
        return _DTYPE_ALIASES[key]
    if key == "uint16":
        raise invalid("dtype uint16 is ambiguous: say dtype='bf16' for raw BF16 bits")
    raise invalid("dtype %r is not one of f32, bf16, f16" % (dtype,))


def kv_dtype_name(kv_dtype: Any, dtype: Any) -> str:
    """Canonical KV cache dtype: "fp8_e4m3" for an FP8 name (see is_fp8), else the q dtype
    `dtype` itself: None, 0 (as in mlav_problem, where the zeroed field means the q dtype: never
    F32 under a 16-bit q) or a name of that same dtype. A 16/32-bit cache of another dtype than
    q is not a supported mix and is refused. Plan, Problem and StepPlan all take kv_dtype
    through here."""
    if kv_dtype is None:
        return dtype_name(dtype)
    if is_fp8(kv_dtype):
        return "fp8_e4m3"
    if _is_int(kv_dtype) and int(kv_dtype) == 0:
        return dtype_name(dtype)
    if isinstance(kv_dtype, (bool, np.bool_)):
        raise invalid("kv_dtype = %r is not a dtype" % (kv_dtype,))
    kv = dtype_name(kv_dtype)
    if kv != dtype_name(dtype):
        raise invalid("kv_dtype %r with dtype %s: the cache has the q dtype or is fp8_e4m3"
                      % (kv_dtype, dtype_name(dtype)))
    return kv


def real_arg(name: str, x: Any) -> float:
    """`x` as a float: an int or float (Python or numpy); a bool, a string ("0.25") or anything
    else is refused rather than converted."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer,
                                                             np.floating)):
        raise invalid("%s = %r must be a number" % (name, x))
    return float(x)


def shard_arg(shard: Any) -> Tuple[int, int, int]:
    """A KV shard as (ranks, rank, stripe) int32s: None is (0, 0, 0), no sharding. A tuple of
    three integers otherwise; the library checks their values (ranks >= 0, 0 <= rank <
    max(ranks, 1), stripe >= 0) with its own sentence."""
    if shard is None:
        return (0, 0, 0)
    if isinstance(shard, (str, bytes)) or not hasattr(shard, "__len__") or len(shard) != 3:
        raise invalid("shard = %r must be (ranks, rank, stripe) or None" % (shard,))
    return tuple(c_int("shard[%d] (%s)" % (i, n), v)
                 for i, (n, v) in enumerate(zip(("ranks", "rank", "stripe"), shard)))


def shape_fields(*, num_heads: Any, softmax_scale: Any, dtype: Any, page_size: Any,
                 max_pages: Any, d_latent: Any, d_rope: Any, kv_dtype: Any,
                 shard: Any = None) -> Dict[str, Any]:
    """The checked shape of a plan, the one rule Problem (so Plan and verify) and StepPlan share:
    int32 integers (see c_int), a number for softmax_scale, the canonical dtype and kv_dtype
    (see kv_dtype_name), the shard (see shard_arg). The library checks the values themselves
    (num_heads >= 1, ...)."""
    f = dict(num_heads=c_int("num_heads", num_heads), d_latent=c_int("d_latent", d_latent),
             d_rope=c_int("d_rope", d_rope), page_size=c_int("page_size", page_size),
             max_pages=c_int("max_pages", max_pages),
             softmax_scale=real_arg("softmax_scale", softmax_scale), dtype=dtype_name(dtype))
    f["kv_dtype"] = kv_dtype_name(kv_dtype, f["dtype"])
    f["shard"] = shard_arg(shard)
    return f


def problem_struct(f: Dict[str, Any], batch: int = 0, q_indptr: Optional[int] = None,
                   kv_lens: Optional[int] = None) -> "_lib.MlavProblem":
    """struct mlav_problem of shape_fields `f` and the lengths' pointers (aligned int32)."""
    return _lib.MlavProblem(
        num_heads=f["num_heads"], d_latent=f["d_latent"], d_rope=f["d_rope"],
        softmax_scale=f["softmax_scale"], dtype=DTYPES[f["dtype"]], page_size=f["page_size"],
        batch=batch, q_indptr=q_indptr, kv_lens=kv_lens, max_pages=f["max_pages"],
        kv_dtype=DTYPES[f["kv_dtype"]], shard_ranks=f["shard"][0], shard_rank=f["shard"][1],
        shard_stripe=f["shard"][2])


def kv_scale_arg(kv_scale: Any, device: Optional[int],
                 kv_dtype: str = "fp8_e4m3") -> Tuple[float, Optional[int]]:
    """(value, pointer) for mlav_tensors.kv_scale / kv_scale_ptr from a run's `kv_scale`, the one
    rule of Plan.run, StepPlan.run and the torch ops:

    a number (int or float, not a bool)
                                  -> (value, None): read now (a captured graph keeps it)
    a 1-element float32 numpy array or CPU tensor, with host tensors (device None)
                                  -> (0.0, its address): read by the run
    a 1-element float32 CUDA tensor on the tensors' device
                                  -> (0.0, its address): read by the run on the device, so a
                                     captured graph follows the tensor's value

    `device` is where the run's tensors are (None: host, else the CUDA index). For a cache
    that is not FP8 (`kv_dtype`), kv_scale must be None: a scale there would mean nothing; an
    FP8 cache needs one. A bool or a string ("0.25") is refused, never converted. The value
    itself (finite and > 0) is the library's to check. The caller keeps the array alive for
    the run."""
    if kv_dtype != "fp8_e4m3":
        if kv_scale is not None:
            raise invalid("kv_scale is the scale of an FP8 cache; this plan's cache is %s "
                          "(say kv_dtype='fp8_e4m3' on the plan for an FP8 cache)" % kv_dtype)
        return 0.0, None
    if kv_scale is None:
        raise invalid("an FP8 cache needs kv_scale (a KV element's value is e4m3(byte) x "
                      "kv_scale): a float, or a 1-element float32 array or tensor")
    if isinstance(kv_scale, (bool, np.bool_)):
        raise invalid("kv_scale must be a number or a float32 tensor, not a bool")
    if isinstance(kv_scale, (int, float, np.integer, np.floating)):
        return float(kv_scale), None
    if not isinstance(kv_scale, np.ndarray) and not is_torch(kv_scale):
        raise invalid("kv_scale = %r must be a number, or a 1-element float32 array or tensor "
                      "(not %s)" % (kv_scale, type(kv_scale).__name__))
    a = wrap("kv_scale", kv_scale)
    n = 1
    for d in a.shape:
        n *= d
    if a.dtype != "float32" or n != 1:
        raise invalid("kv_scale is %s; a scale tensor is one float32 value (shape [1] or [])"
                      % a.describe())
    if a.device != device:
        raise invalid("kv_scale is in %s but the tensors are in %s: a scale tensor lives with "
                      "them (or pass a float, read now)"
                      % (a.where, "host memory" if device is None else "cuda:%d" % device))
    return 0.0, a.ptr


def kv_scale_value(kv_scale: Any) -> float:
    """The value of an FP8 cache's kv_scale where a file needs the value itself (a bundle's
    kv_scale tensor): kv_scale_arg's kinds (a number, not a bool; or a 1-element array or
    tensor, here of any float dtype and anywhere, read back to the host), checked finite and > 0
    in float32 as the library checks a run's."""
    if isinstance(kv_scale, (bool, np.bool_)):
        raise invalid("kv_scale must be a number or a float32 tensor, not a bool")
    if is_torch(kv_scale):
        kv_scale = kv_scale.detach().cpu().numpy()
    a = np.asarray(kv_scale, dtype=np.float64)
    if a.size != 1:
        raise invalid("kv_scale must be one value, not an array of shape %s" % list(a.shape))
    v = float(a.reshape(-1)[0])
    if not (np.isfinite(v) and v > 0 and np.isfinite(np.float32(v)) and np.float32(v) > 0):
        raise invalid("kv_scale = %r must be finite and > 0 (an FP8 element's value is "
                      "e4m3(byte) x kv_scale)" % v)
    return v


def infer_dtype(q: Tensor) -> str:
    """Plan dtype of a q tensor: float32 -> f32, float16 -> f16, torch.bfloat16 -> bf16; a uint16
    array (raw BF16 bits) needs dtype='bf16' said explicitly."""
    a = wrap("q", q)
    if a.dtype == "uint16":
        raise invalid("q is uint16: pass dtype='bf16' if it holds raw BF16 bits")
    return dtype_name(a.dtype)


def backend_id(backend: Union[str, int]) -> int:
    """mlav_backend value of a name ("auto", "cpu", "cuda", "cuda-naive", "reference") or value."""
    if isinstance(backend, (int, np.integer)) and int(backend) in _BACKEND_NAMES:
        return int(backend)
    if isinstance(backend, str) and backend.lower() in BACKENDS:
        return BACKENDS[backend.lower()]
    raise invalid("backend %r is not auto, cpu, cuda, cuda-naive or reference" % (backend,))


def backend_compiled(backend: Union[str, int]) -> bool:
    """Whether a backend was compiled into the loaded library."""
    return bool(_lib.load().mlav_backend_compiled(backend_id(backend)))


def cuda_device_count() -> int:
    """CUDA devices of compute capability >= 8.0 the library sees (0 without CUDA)."""
    return int(_lib.load().mlav_cuda_device_count())


def version() -> str:
    """The loaded library's version string ("0.2.0")."""
    return _lib.text(_lib.load().mlav_version_string())


def limits_max_batch() -> int:
    """The most requests of a plan for limits (StepPlan's max_batch), as the library says."""
    return int(_lib.load().mlav_limits_max_batch())


def tree_mask_words(max_q_len: int) -> int:
    """uint32 words per tree-mask row for a batch whose longest draft has max_q_len nodes."""
    return int(_lib.load().mlav_tree_mask_words(c_int("max_q_len", max_q_len)))


class Context:
    """A backend chosen once (mlav_context_create). ``backend`` is what AUTO picked, ``note``
    says why. Used by one thread at a time (plan creation is serialised here)."""

    def __init__(self, backend: Union[str, int] = "auto") -> None:
        lib = _lib.load()
        h = ctypes.c_void_p()
        check(lib.mlav_context_create(ctypes.byref(h), backend_id(backend)))
        self._h = h
        self._lock = threading.Lock()

    @property
    def backend(self) -> str:
        """The backend's name ("cpu", "cuda", ...)."""
        return _BACKEND_NAMES[_lib.load().mlav_context_backend(self._handle())]

    @property
    def note(self) -> str:
        """How the backend was chosen (AUTO's reasoning, an MLAV_BACKEND override, a fallback)."""
        return _lib.text(_lib.load().mlav_context_note(self._handle()))

    def _handle(self):
        if self._h is None:
            raise invalid("the context is closed")
        return self._h

    def close(self) -> None:
        """Free the context (plans made from it keep it alive until they are closed)."""
        h, self._h = getattr(self, "_h", None), None
        if h is not None and _lib._lib is not None:
            _lib._lib.mlav_context_free(h)

    __del__ = close

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return "Context(%s)" % (self.backend if self._h is not None else "closed")


class Problem:
    """The shape of one verify step (struct mlav_problem): the lengths are host data that the
    plan reads to schedule the KV splits.

    num_heads      H
    q_indptr       [B+1] ints: request b owns query rows q_indptr[b] .. q_indptr[b+1]-1
    kv_lens        [B] ints: prefix + draft nodes of each request (its draft rows included)
    softmax_scale  float
    d_latent, d_rope   512, 64 (DeepSeek-V3 / Kimi K2)
    dtype          "bf16" | "f16" | "f32" (of q and out, and of kv_cache by default)
    page_size      1 (SGLang's token pool) .. 64 (FlashMLA / vLLM) or any >= 1
    max_pages      page_table row stride; default ceil(max(kv_lens) / page_size)
    kv_dtype       None (the cache has `dtype`) or "fp8_e4m3" (alias "fp8"): an E4M3 cache,
                   whose runs take kv_scale
    shard          None, or (ranks, rank, stripe): context-parallel decode, this rank holding
                   global KV row g of each request when (g // stripe) % ranks == rank, at local
                   row (g // (stripe * ranks)) * stripe + g % stripe, which its page_table row
                   addresses. q_indptr, kv_lens and the tree mask stay global; the run's out
                   and lse are the rank's partial state (merge them: mlaverify.merge). Give
                   max_pages for the rank's page table (the default is the global one's).

    Lists, numpy arrays or torch tensors are accepted for the lengths (a CUDA tensor is copied
    to the host, which synchronizes: pass host copies, e.g. SGLang's seq_lens_cpu).
    """

    def __init__(self, *, num_heads: int, q_indptr: Any, kv_lens: Any, softmax_scale: float,
                 d_latent: int = 512, d_rope: int = 64, dtype: Any = "bf16",
                 page_size: int = 1, max_pages: Optional[int] = None,
                 kv_dtype: Any = None, shard: Any = None) -> None:
        self.kv_lens = host_int32("kv_lens", kv_lens)
        if self.kv_lens.ndim != 1:
            raise invalid("kv_lens must be 1-D [B], not %s" % list(self.kv_lens.shape))
        self.batch = c_int("batch (len(kv_lens))", self.kv_lens.shape[0])
        self.q_indptr = host_int32("q_indptr", q_indptr, shape=(self.batch + 1,))
        if max_pages is None:
            ps = c_int("page_size", page_size)
            longest = int(self.kv_lens.max()) if self.batch else 0
            max_pages = max(1, -(-longest // max(ps, 1)))
        f = self._fields = shape_fields(
            num_heads=num_heads, softmax_scale=softmax_scale, dtype=dtype, page_size=page_size,
            max_pages=max_pages, d_latent=d_latent, d_rope=d_rope, kv_dtype=kv_dtype,
            shard=shard)
        self.num_heads, self.d_latent, self.d_rope = f["num_heads"], f["d_latent"], f["d_rope"]
        self.softmax_scale, self.dtype, self.kv_dtype = (f["softmax_scale"], f["dtype"],
                                                         f["kv_dtype"])
        self.page_size, self.max_pages = f["page_size"], f["max_pages"]
        self.shard = f["shard"]
        q_lens = np.diff(self.q_indptr) if self.batch else np.zeros(0, np.int32)
        self.num_tokens = int(self.q_indptr[-1])            # T
        self.max_q_len = int(q_lens.max()) if self.batch else 0
        self.width = self.d_latent + self.d_rope             # W

    @property
    def q_lens(self) -> np.ndarray:
        return np.diff(self.q_indptr)

    @property
    def mask_words(self) -> int:
        """uint32 words per tree-mask row: ceil(max_q_len / 32), at least 1."""
        return tree_mask_words(self.max_q_len)

    def _struct(self) -> "_lib.MlavProblem":
        return problem_struct(self._fields, self.batch, self.q_indptr.ctypes.data,
                              self.kv_lens.ctypes.data)

    def __repr__(self):
        kv = "" if self.kv_dtype == self.dtype else ", kv_dtype=%s" % self.kv_dtype
        return ("Problem(H=%d, Dl=%d, Dr=%d, %s%s, page_size=%d, B=%d, T=%d, max_q_len=%d, "
                "max_pages=%d)" % (self.num_heads, self.d_latent, self.d_rope, self.dtype, kv,
                                   self.page_size, self.batch, self.num_tokens,
                                   self.max_q_len, self.max_pages))


def no_cuda_in_torch(what: str) -> NoDeviceError:
    """The NoDeviceError for `what` needing CUDA through a torch without it (a CPU-only build,
    or no device visible), in place of torch's own AssertionError or RuntimeError."""
    torch = torch_module()
    built = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    why = ("torch %s is built without CUDA" % torch.__version__) if torch is not None and \
        not built else "torch sees no CUDA device (torch.cuda.is_available() is False)"
    return NoDeviceError(ERR_NO_DEVICE, "%s needs CUDA, but %s: use host tensors and a CPU "
                         "backend, or a CUDA build of torch on a GPU host" % (what, why))


def _cuda_index(device: Any) -> int:
    """CUDA device index of an int, "cuda", "cuda:1" or torch.device (torch needed, with
    CUDA: else NoDeviceError)."""
    torch = torch_module()
    if torch is None:
        raise invalid("device=%r needs torch (import torch first)" % (device,))
    if isinstance(device, bool):
        raise invalid("device=%r is not a CUDA device" % (device,))
    try:
        d = torch.device(device) if not isinstance(device, int) else \
            torch.device("cuda", device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise invalid("device=%r is not a device (%s)" % (device, e)) from None
    if d.type != "cuda":
        raise invalid("device=%r is not a CUDA device" % (device,))
    if not torch.cuda.is_available():
        raise no_cuda_in_torch("device=%r" % (device,))
    index = d.index if d.index is not None else torch.cuda.current_device()
    if index >= torch.cuda.device_count():
        raise NoDeviceError(ERR_NO_DEVICE, "device=%r: torch sees %d CUDA device(s)"
                            % (device, torch.cuda.device_count()))
    return index


def _torch_stream(stream, device):
    """(torch stream object or None, cudaStream_t handle as int) for a run on `device`."""
    torch = torch_module()
    if stream is None:
        s = torch.cuda.current_stream(device)
        return None, s.cuda_stream
    if isinstance(stream, int):
        return torch.cuda.ExternalStream(stream, device=device), stream
    if hasattr(stream, "cuda_stream"):
        return stream, stream.cuda_stream
    raise invalid("stream must be None, a torch.cuda.Stream or a cudaStream_t handle (int)")


class _StreamScope:
    """`torch.cuda.stream(s)` when s is given, else nothing: allocations made inside belong to
    the stream the run uses, as torch's caching allocator needs."""

    def __init__(self, s):
        self.s = s
        self.cm = None

    def __enter__(self):
        if self.s is not None:
            self.cm = torch_module().cuda.stream(self.s)
            self.cm.__enter__()

    def __exit__(self, *exc):
        if self.cm is not None:
            self.cm.__exit__(*exc)


def host_workspace(nbytes: int) -> np.ndarray:
    """A zeroed, 256-byte aligned host workspace of `nbytes` (at least 1) bytes: a numpy view."""
    n = max(nbytes, 1)
    buf = np.zeros(n + _ALIGN, dtype=np.uint8)
    off = (-buf.ctypes.data) % _ALIGN
    return buf[off:off + n]


def device_workspace(nbytes: int, device: int) -> Any:
    """A zeroed, 256-byte aligned workspace of `nbytes` (at least 1) bytes on CUDA `device`: a
    view of a torch uint8 tensor, allocated on the current stream there."""
    torch = torch_module()
    n = max(nbytes, 1)
    with torch.cuda.device(device):
        buf = torch.zeros(n + _ALIGN, dtype=torch.uint8, device=torch.device("cuda", device))
    off = (-buf.data_ptr()) % _ALIGN
    return buf[off:off + n]


def run_method(doc: str):
    """PlanCore._run as a class's own `run` with its own docstring: the same code object (one
    body), no wrapper call on the per-layer path."""
    fn = PlanCore._run
    f = types.FunctionType(fn.__code__, fn.__globals__, "run", fn.__defaults__, fn.__closure__)
    f.__doc__ = doc
    return f


class PlanCore:
    """What every plan of the binding is: one mlav_plan (the library has one kind of plan: a
    plan for one problem is a plan for limits whose update ran at plan time), made on a context
    and a CUDA device, with its backend, its workspace's size and place, and its lifetime.
    Plan (one problem) and StepPlan (limits: mlaverify.steps) are this core plus their calls."""

    _h = None
    _what = "plan"  # for the sentence of a closed plan

    def _make(self, create: Any, args: Tuple[Any, ...], context: Optional[Context],
              backend: Union[str, int], device: Any) -> None:
        """Create the plan with `create(ctx, *args, &plan)` (mlav_plan_create or
        mlav_plan_create_for_limits) on `device` (None: the current one) and read back what the
        library chose."""
        self._ctx = context if context is not None else Context(backend)
        self._lock = threading.Lock()  # runs fill one tensors struct under it
        lib = _lib.load()
        self._device = _cuda_index(device) if device is not None else None
        h = ctypes.c_void_p()
        with self._ctx._lock:
            if self._device is not None:
                with torch_module().cuda.device(self._device):
                    check(create(self._ctx._handle(), *args, ctypes.byref(h)))
            else:
                check(create(self._ctx._handle(), *args, ctypes.byref(h)))
        self._h = h
        self.backend = _BACKEND_NAMES[lib.mlav_plan_backend(h)]
        self.workspace_bytes = int(lib.mlav_plan_workspace_bytes(h))
        self.workspace_memory = "device" if lib.mlav_plan_workspace_memory(h) else "host"

    def _handle(self):
        if self._h is None:
            raise invalid("the %s is closed" % self._what)
        return self._h

    def _release(self) -> None:
        """Drop the buffers the plan keeps (its workspace, its outputs)."""

    def close(self) -> None:
        """Free the plan (and its workspace). A CUDA graph that captured one of its calls must
        be destroyed first."""
        h, self._h = getattr(self, "_h", None), None
        if h is not None and _lib._lib is not None:
            _lib._lib.mlav_plan_free(h)
        self._release()

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the one run body --------------------------------------------------------------------------
    # Plan and StepPlan run through _run. What differs is data set at creation (_run_setup: the
    # shapes of the run's tensors, the shape their dtypes come from) and three hooks: the
    # outputs made when out or lse is None (_own_outputs), where the tensors may be
    # (_check_place) and how mlav_run is called there (_call: workspace and stream). A call
    # whose tensors pass the fast checks (_fast_numpy, _fast_torch: compared by identity) skips
    # check_run_tensors, whose sentences it raises otherwise.

    def _run_setup(self, shape: Any, tokens: int, batch: int, mask_words: int,
                   limits: bool, host_tensors: bool) -> None:
        """The run's data: `shape` (num_heads, d_latent, d_rope, width, page_size, max_pages,
        dtype, kv_dtype: a Problem, or the StepPlan itself), the run tensors' shapes of
        `tokens` rows, `batch` requests and `mask_words` (a plan for limits: the limits'), and
        whether host tensors may take the fast path (those of a CUDA plan for limits may not:
        _check_place refuses them)."""
        self._shape = shape
        self._host_fast = host_tensors
        self._run_dims = (tokens, batch, mask_words, limits)
        H, T, B = shape.num_heads, tokens, batch
        self._shapes = ((T, H, shape.width), (B, shape.max_pages), (T, mask_words),
                        (T, H, shape.d_latent), (T, H))
        self._rows_shape = (B,)
        self._page_size, self._width = shape.page_size, shape.width
        self._np = (_NP_ELEMENT[shape.dtype], _NP_ELEMENT.get(shape.kv_dtype))
        self._fp8 = shape.kv_dtype == "fp8_e4m3"
        self._tf = None       # torch's objects for the fast path, made at the first torch call
        self._fbufs = {}      # q's dtype object -> the plan's own (out, lse) (StepPlan)
        self._run_fn = _lib.load().mlav_run
        # the plan's place: a Plan's _call sets it per run (its host tensors may run offload)
        self._t = _lib.MlavTensors(memory=MEM_HOST if self._device is None else MEM_DEVICE)
        self._t_ref = ctypes.byref(self._t)

    def _tdevice(self):
        """The plan's place as a torch.device (cpu, or cuda:i), made once."""
        d = self.__dict__.get("_tdev")
        if d is None:
            torch = torch_module()
            d = self._tdev = torch.device("cpu") if self._device is None else \
                torch.device("cuda", self._device)
        return d

    def _torch_fast(self):
        """torch's objects the fast path compares by identity (made at the first torch run)."""
        torch = torch_module()
        sh = self._shape
        t = getattr(torch, ELEMENTS[sh.dtype][0])
        # the cache's torch elements: q's, or an FP8 cache's two (ELEMENTS; uint8 where torch
        # has no float8_e4m3fn)
        kv = (t, t) if sh.kv_dtype == sh.dtype else \
            tuple(getattr(torch, e, torch.uint8) for e in ELEMENTS[sh.kv_dtype])
        u32 = getattr(torch, "uint32", torch.int32)
        self._tf = (torch.Tensor, torch.strided, self._tdevice(), t, kv[0], kv[1], torch.int32,
                    u32, torch.float32)
        return self._tf

    def _fast_torch(self, q, kv, pt, m, out, lse, rows):
        """The pointers of torch tensors on the plan's device that pass every check of
        check_run_tensors (dtype, place, layout, contiguity, shape, writable outputs), compared
        by identity; None when one does not (then _checked says which). q is a torch.Tensor."""
        Tensor, strided, dev, dt, kdt, kdt2, i32, u32, f32 = self._tf or self._torch_fast()
        sq, spt, sm, so, sl = self._shapes
        if not (isinstance(kv, Tensor) and isinstance(pt, Tensor) and isinstance(out, Tensor)
                and isinstance(lse, Tensor)):
            return None
        kd = kv.dtype
        if q.dtype is not dt or out.dtype is not dt or pt.dtype is not i32 or \
                lse.dtype is not f32 or (kd is not kdt and kd is not kdt2):
            return None
        if q.device != dev or kv.device != dev or pt.device != dev or out.device != dev or \
                lse.device != dev:
            return None
        if q.layout is not strided or kv.layout is not strided or pt.layout is not strided or \
                out.layout is not strided or lse.layout is not strided:
            return None
        if not (q.is_contiguous() and kv.is_contiguous() and pt.is_contiguous() and
                out.is_contiguous() and lse.is_contiguous()):
            return None
        if out.requires_grad or lse.requires_grad:
            return None
        ks = kv.shape
        if q.shape != sq or out.shape != so or lse.shape != sl or \
                len(ks) != 3 or ks[1] != self._page_size or ks[2] != self._width:
            return None
        if m is None:
            mp = None
        elif isinstance(m, Tensor) and (m.dtype is i32 or m.dtype is u32) and \
                m.device == dev and m.layout is strided and m.is_contiguous() and m.shape == sm:
            mp = m.data_ptr()
        else:
            return None
        if rows is None:
            if pt.shape != spt:
                return None
            rp, nrows = None, 0
        elif isinstance(rows, Tensor) and rows.dtype is i32 and rows.device == dev and \
                rows.layout is strided and rows.is_contiguous() and rows.shape == self._rows_shape \
                and pt.dim() == 2 and pt.shape[1] == spt[1] and pt.shape[0] >= 1:
            rp, nrows = rows.data_ptr(), pt.shape[0]
        else:
            return None
        return (q.data_ptr(), kv.data_ptr(), ks[0], pt.data_ptr(), mp, out.data_ptr(),
                lse.data_ptr(), rp, nrows)

    def _fast_numpy(self, q, kv, pt, m, out, lse, rows):
        """As _fast_torch for numpy arrays (host memory; q is an ndarray)."""
        nd = np.ndarray
        if not self._host_fast or type(kv) is not nd or type(pt) is not nd or \
                type(out) is not nd or type(lse) is not nd or (m is not None and type(m) is not nd):
            return None
        dt, kdt = self._np
        if q.dtype is not dt or out.dtype is not dt or kv.dtype is not (kdt or dt) or \
                pt.dtype is not _NP_I32 or lse.dtype is not _NP_F32:
            return None
        sq, spt, sm, so, sl = self._shapes
        ks = kv.shape
        if q.shape != sq or out.shape != so or lse.shape != sl or \
                len(ks) != 3 or ks[1] != self._page_size or ks[2] != self._width:
            return None
        if rows is None:
            if pt.shape != spt:
                return None
            rp, nrows = None, 0
        elif type(rows) is nd and rows.dtype is _NP_I32 and rows.shape == self._rows_shape and \
                rows.flags.c_contiguous and rows.flags.aligned and len(pt.shape) == 2 and \
                pt.shape[1] == spt[1] and pt.shape[0] >= 1:
            rp, nrows = np_ptr(rows), pt.shape[0]
        else:
            return None
        fq, fkv, fpt, fo, fl = q.flags, kv.flags, pt.flags, out.flags, lse.flags
        if not (fq.c_contiguous and fkv.c_contiguous and fpt.c_contiguous and fo.c_contiguous
                and fl.c_contiguous and fq.aligned and fkv.aligned and fpt.aligned and
                fo.aligned and fl.aligned and fo.writeable and fl.writeable):
            return None
        if m is None:
            mp = None
        elif (m.dtype is _NP_U32 or m.dtype is _NP_I32) and m.shape == sm and \
                m.flags.c_contiguous and m.flags.aligned:
            mp = np_ptr(m)
        else:
            return None
        return (np_ptr(q), np_ptr(kv), ks[0], np_ptr(pt), mp, np_ptr(out), np_ptr(lse), rp,
                nrows)

    def _checked(self, q, kv_cache, page_table, tree_mask, out, lse, page_table_rows, stream):
        """Every check of a run's tensors (check_run_tensors), raising InvalidArgumentError with
        what is wrong, and the place's (_check_place); out None and lse None made by
        _own_outputs (lse False: not computed). Returns (out, lse, pointers, the tensors' CUDA
        device or None)."""
        tokens, batch, words, limits = self._run_dims
        a_q, a_kv, a_pt, a_m, a_out, a_lse, a_rows = check_run_tensors(
            self._shape, q, kv_cache, page_table, tree_mask, out, lse, page_table_rows,
            tokens=tokens, batch=batch, mask_words=words, limits=limits)
        device = a_q.device
        self._check_place(a_q)
        if out is None or lse is None:
            out, lse = self._own_outputs(a_q, out, lse, stream)
            a_out = wrap("out", out, writable=True)
            a_lse = wrap("lse", lse, writable=True) if lse is not False else None
        if lse is False:
            lse = None
        rows = (None, 0) if a_rows is None else (a_rows.ptr, a_pt.shape[0])
        return out, lse, (a_q.ptr, a_kv.ptr, a_kv.shape[0], a_pt.ptr,
                          a_m.ptr if a_m is not None else None, a_out.ptr,
                          a_lse.ptr if a_lse is not None else None) + rows, device

    def _run(self, q, kv_cache, page_table, tree_mask=None, out=None, lse=None, kv_scale=None,
             page_table_rows=None, stream=None):
        """The one run body (Plan.run calls it; StepPlan.run is it, see run_method); returns
        (out, lse)."""
        ptrs = device = None
        numpy = type(q) is np.ndarray
        if numpy or is_torch(q):
            o, l = out, lse
            if o is None or l is None:  # the plan's own buffers, once made (StepPlan)
                b = self._fbufs.get(q.dtype)
                if b is not None:
                    o = b[0] if o is None else o
                    l = b[1] if l is None else l
            if o is not None and l is not None:
                ptrs = (self._fast_numpy if numpy else self._fast_torch)(
                    q, kv_cache, page_table, tree_mask, o, l, page_table_rows)
                if ptrs is not None:
                    out, lse = o, l
                    if not numpy:  # torch tensors in the plan's place
                        device = self._device
        if ptrs is None:
            out, lse, ptrs, device = self._checked(q, kv_cache, page_table, tree_mask, out, lse,
                                                   page_table_rows, stream)
        scale = self._fp8 or kv_scale is not None
        if scale:
            scale = kv_scale_arg(kv_scale, device, self._shape.kv_dtype)
        t = self._t
        with self._lock:
            (t.q, t.kv_cache, t.num_pages, t.page_table, t.tree_mask, t.out, t.lse,
             t.page_table_rows, t.page_table_num_rows) = ptrs
            if scale:  # set on FP8 plans only: kv_scale_arg refuses a scale on any other
                t.kv_scale, t.kv_scale_ptr = scale
            st = self._call(self._run_fn, self._t_ref, device, stream)
        if st:
            check(st)
        return out, lse


class Plan(PlanCore):
    """A scheduled problem (mlav_plan_create): plan once per batch shape, run every step.

    Plan(problem) or Plan(num_heads=..., q_indptr=..., ...) with Problem's fields, plus

    backend   "auto" (CUDA if present, else CPU), "cpu", "cuda", "cuda-naive", "reference";
              ignored when `context` is given
    context   a Context to plan on (one is made otherwise)
    device    a CUDA device (int, "cuda:1", torch.device) to plan on; needs torch. Its
              workspace is then allocated here, so that the first run can be captured in a
              CUDA graph. Default: torch's current device when torch is imported.

    The plan copies the lengths. Creating it may allocate and synchronize (never inside a graph
    capture); ``run`` with CUDA tensors does neither after the workspace exists.
    """

    def __init__(self, problem: Optional[Problem] = None, *, backend: Union[str, int] = "auto",
                 context: Optional[Context] = None, device: Any = None, **fields: Any) -> None:
        if problem is None:
            problem = Problem(**fields)
        elif fields:
            raise invalid("give a Problem or its fields, not both")
        self.problem = problem
        self._host_ws = None
        self._dev_ws = None
        self._ws_lock = threading.Lock()  # the device workspace's allocation, once
        self._dev_ws_streams = set()
        self._ws_stream = None
        self._make(_lib.load().mlav_plan_create, (ctypes.byref(problem._struct()),), context,
                   backend, device)
        self._run_setup(problem, problem.num_tokens, problem.batch, problem.mask_words, False,
                        True)
        if self.workspace_memory == "device":
            torch = torch_module()
            if self._device is None and torch is not None and torch.cuda.is_available():
                self._device = torch.cuda.current_device()
            if self._device is not None:
                self._device_workspace(self._device, None)
        elif self.workspace_bytes:
            self._host_ws = host_workspace(self.workspace_bytes)

    # -- workspace -----------------------------------------------------------------------------

    def _device_workspace(self, device, stream):
        """The plan's device workspace (a torch uint8 CUDA tensor), allocated once."""
        if self.workspace_bytes == 0:
            return None
        torch = torch_module()
        if self._dev_ws is None:
            with self._ws_lock:
                if self._dev_ws is None:
                    with torch.cuda.device(device), _StreamScope(stream):
                        if torch.cuda.is_current_stream_capturing():
                            raise invalid(
                                "the plan's %d-byte workspace would be allocated inside a CUDA "
                                "graph capture: create the Plan with device=... or run it once "
                                "before capturing" % self.workspace_bytes)
                        ws = device_workspace(self.workspace_bytes, device)
                        # torch ties a block to the stream it was allocated on
                        self._ws_stream = torch.cuda.current_stream(device).cuda_stream
                        self._dev_ws = ws
        return self._dev_ws

    # -- run -----------------------------------------------------------------------------------

    def run(self, q: Tensor, kv_cache: Tensor, page_table: Tensor,
            tree_mask: Optional[Tensor] = None, out: Optional[Tensor] = None,
            lse: Union[Tensor, None, bool] = None, stream: Any = None, kv_scale: Any = None,
            page_table_rows: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
        """Run the plan; returns (out, lse).

        q           [T, H, Dl+Dr]                dtype (torch.bfloat16 / numpy uint16 bits for
                                                 bf16, float16, float32)
        kv_cache    [num_pages, page_size, Dl+Dr]  same dtype; with kv_dtype "fp8_e4m3":
                                                 torch.float8_e4m3fn, or uint8 e4m3 bytes
        page_table  [B, max_pages]               int32; with page_table_rows
                    [num_rows, max_pages]        (num_rows >= 1): a table shared by requests
        tree_mask   [T, words] uint32 or int32   packed draft-visibility bits, or None for a
                                                 causal chain (DFlash, top-1 EAGLE)
        out         [T, H, Dl] or None           written (allocated when None)
        lse         [T, H] float32, None (allocated) or False (not computed)
        stream      CUDA tensors only: torch.cuda.Stream or cudaStream_t handle; default the
                    current torch stream. Ignored for host tensors.
        kv_scale    FP8 caches only (else None, and refused): a float, or a 1-element float32
                    array / tensor where the tensors are (numpy or CPU torch for host tensors,
                    a CUDA tensor on their device), read by the run itself (see kv_scale_arg)
        page_table_rows  None (request b's row of page_table is row b), or [B] int32 where the
                    other tensors are: request b's row is page_table_rows[b], each in
                    [0, num_rows) (SGLang's req_pool_indices into req_to_token)

        All numpy / CPU torch (host memory) or all torch CUDA tensors on the plan's device.
        With CUDA tensors on a CUDA plan the call is asynchronous on the stream, allocates
        nothing (given out and lse, after the workspace exists) and can be captured in a CUDA
        graph; the Plan must then outlive the graph. One Plan's cached workspace serves one
        stream at a time: for concurrent streams use one Plan per stream.
        Raises MlavError subclasses (InvalidArgumentError, UnsupportedError, ...).
        """
        return self._run(q, kv_cache, page_table, tree_mask, out, lse, kv_scale,
                         page_table_rows, stream)

    # -- the run's hooks (PlanCore._run) -------------------------------------------------------

    def _check_place(self, a_q) -> None:
        device = a_q.device
        if device is not None and self._device is not None and device != self._device and \
                self.workspace_memory == "device":
            raise invalid("the tensors are on cuda:%d but the plan was made on cuda:%d"
                          % (device, self._device))

    def _own_outputs(self, a_q, out, lse, stream):
        """out / lse None: new ones of the tensors' kind (on the run's stream)."""
        p = self.problem
        torch_stream = None
        if a_q.device is not None:
            torch_stream = _torch_stream(stream, a_q.device)[0]
        with _StreamScope(torch_stream):
            if out is None:
                out = empty_like_kind(a_q, (p.num_tokens, p.num_heads, p.d_latent), a_q.dtype)
            if lse is None:
                lse = empty_like_kind(a_q, (p.num_tokens, p.num_heads), "float32")
        return out, lse

    def _call(self, fn, ref, device, stream) -> int:
        """fn = mlav_run of `ref` (the filled struct): host tensors (a CPU plan's workspace, or a
        CUDA plan's offload mode), or device tensors on `stream` (default: torch's current
        one)."""
        self._t.memory = MEM_HOST if device is None else MEM_DEVICE
        if device is None:
            return self._call_host(fn, ref)
        torch_stream, handle = _torch_stream(stream, device)
        return self._call_device(fn, ref, device, torch_stream, handle)

    def _call_host(self, fn, ref) -> int:
        if self.workspace_memory == "host":
            ws = self._host_ws
            return fn(self._handle(), ref, ws.ctypes.data if ws is not None else None,
                      self.workspace_bytes, None)
        # a CUDA plan given host tensors (offload mode): the workspace is device memory
        torch = torch_module()
        if self.workspace_bytes and (torch is None or not torch.cuda.is_available()):
            # no way to allocate device memory from here: the one-shot call allocates it
            st = self.problem._struct()
            with self._ctx._lock:
                return _lib.load().mlav_verify(self._ctx._handle(), ctypes.byref(st), ref)
        device = self._device if self._device is not None else (
            torch.cuda.current_device() if torch is not None and torch.cuda.is_available()
            else None)
        if device is None:  # workspace_bytes == 0 and no torch: nothing device-side to pass
            return fn(self._handle(), ref, None, 0, None)
        ws = self._device_workspace(device, None)
        handle = torch.cuda.current_stream(device).cuda_stream
        with torch.cuda.device(device):
            return fn(self._handle(), ref, ws.data_ptr() if ws is not None else None,
                      self.workspace_bytes, handle)

    def _call_device(self, fn, ref, device, torch_stream, handle) -> int:
        torch = torch_module()
        if self.workspace_memory == "host":
            # a CPU plan given device tensors: the library answers MLAV_ERR_UNSUPPORTED
            ws = self._host_ws
            return fn(self._handle(), ref, ws.ctypes.data if ws is not None else None,
                      self.workspace_bytes, None)
        ws = self._device_workspace(device, torch_stream)
        if ws is not None and handle != self._ws_stream and handle not in self._dev_ws_streams:
            with torch.cuda.device(device):
                capturing = torch.cuda.is_current_stream_capturing()
            if not capturing:
                # the workspace is in use on this stream too: torch must not reuse its memory
                # before that work is done when the plan is freed
                s = torch_stream if torch_stream is not None else \
                    torch.cuda.ExternalStream(handle, device=device)
                ws.record_stream(s)
                self._dev_ws_streams.add(handle)
        with torch.cuda.device(device):
            return fn(self._handle(), ref, ws.data_ptr() if ws is not None else None,
                      self.workspace_bytes, handle)

    def _release(self) -> None:
        self._dev_ws = None
        self._host_ws = None

    def __repr__(self) -> str:
        return "Plan(%s, backend=%s, workspace=%d bytes %s)" % (
            self.problem, self.backend, self.workspace_bytes, self.workspace_memory)


_ELEMENT_DOC = {"bfloat16": "torch.bfloat16", "uint16": "uint16 (raw BF16 bits)",
                "float8_e4m3fn": "torch.float8_e4m3fn", "uint8": "uint8 (e4m3 bytes)"}

_SHAPE_DOC = {
    "q": "[T, H, d_latent + d_rope]",
    "page_table": "[B, max_pages]",
    "page_table_rows": "[B] int32, one page-table row per request",
    "tree_mask": "[T, words], words = ceil(max_q_len / 32)",
    "out": "[T, H, d_latent]",
    "lse": "[T, H]",
}
_LIMITS_DOC = {
    "q": "[max_tokens, H, d_latent + d_rope]",
    "page_table": "[max_batch, max_pages]",
    "page_table_rows": "[max_batch] int32, one page-table row per request slot",
    "tree_mask": "[max_tokens, words], words = ceil(limits.max_q_len / 32)",
    "out": "[max_tokens, H, d_latent]",
    "lse": "[max_tokens, H]",
}


def check_run_tensors(shape: Any, q: Tensor, kv_cache: Tensor, page_table: Tensor,
                      tree_mask: Optional[Tensor], out: Optional[Tensor], lse: Any,
                      page_table_rows: Optional[Tensor], *, tokens: int, batch: int,
                      mask_words: int, limits: bool) -> tuple:
    """The checks of one run's tensors, Plan's and StepPlan's alike: each a dense, aligned,
    native-endian numpy array or strided contiguous torch tensor (outputs writable), all in one
    place, of the dtypes of `shape` (num_heads, d_latent, d_rope, page_size, max_pages, dtype,
    kv_dtype) and of the shapes of `tokens` rows, `batch` requests (a plan: its B; a plan for
    limits: max_batch, `limits` True) and `mask_words`. out None and lse None or False are
    skipped (the caller makes them). Raises InvalidArgumentError naming what is wrong; returns
    the Arrs (q, kv_cache, page_table, tree_mask, out, lse, page_table_rows), None where absent.
    """
    doc = _LIMITS_DOC if limits else _SHAPE_DOC
    H, Dl, W = shape.num_heads, shape.d_latent, shape.d_latent + shape.d_rope
    a_q = wrap("q", q)
    a_kv = wrap("kv_cache", kv_cache)
    a_pt = wrap("page_table", page_table)
    a_mask = wrap("tree_mask", tree_mask) if tree_mask is not None else None
    a_out = wrap("out", out, writable=True) if out is not None else None
    a_lse = wrap("lse", lse, writable=True) if lse is not None and lse is not False else None
    a_rows = wrap("page_table_rows", page_table_rows) if page_table_rows is not None else None
    args = [a for a in (a_q, a_kv, a_pt, a_mask, a_out, a_lse, a_rows) if a is not None]
    if len({a.device for a in args}) > 1:
        raise invalid("tensors are in different places: " +
                      ", ".join("%s on %s" % (a.name, a.where) for a in args) +
                      " (all host memory, or all on one CUDA device)")
    for a, dt in ((a_q, shape.dtype), (a_kv, shape.kv_dtype), (a_out, shape.dtype)):
        if a is not None and a.dtype not in ELEMENTS[dt]:
            raise invalid("%s has dtype %s; the plan's %s %s needs %s" % (
                a.name, a.dtype, "kv_dtype" if a is a_kv else "dtype", dt,
                " or ".join(_ELEMENT_DOC.get(e, e) for e in ELEMENTS[dt])))
    if a_out is not None and a_out.dtype != a_q.dtype:
        raise invalid("out has dtype %s but q has %s" % (a_out.dtype, a_q.dtype))
    if a_pt.dtype != "int32":
        raise invalid("page_table has dtype %s; it must be int32" % a_pt.dtype)
    if a_rows is not None and a_rows.dtype != "int32":
        raise invalid("page_table_rows has dtype %s; it must be int32" % a_rows.dtype)
    if a_mask is not None and a_mask.dtype not in ("uint32", "int32"):
        raise invalid("tree_mask has dtype %s; it must be uint32 or int32 (packed bits: "
                      "see tree_mask_from_parents / pack_mask)" % a_mask.dtype)
    if a_lse is not None and a_lse.dtype != "float32":
        raise invalid("lse has dtype %s; it must be float32" % a_lse.dtype)
    want = [("q", a_q, (tokens, H, W)), ("tree_mask", a_mask, (tokens, mask_words)),
            ("out", a_out, (tokens, H, Dl)), ("lse", a_lse, (tokens, H)),
            ("page_table_rows", a_rows, (batch,))]
    if a_rows is None:
        want.append(("page_table", a_pt, (batch, shape.max_pages)))
    elif len(a_pt.shape) != 2 or a_pt.shape[0] < 1 or a_pt.shape[1] != shape.max_pages:
        raise invalid("page_table has shape %s, expected [num_rows >= 1, %d] (with "
                      "page_table_rows: a table shared by the requests, [num_rows, max_pages])"
                      % (list(a_pt.shape), shape.max_pages))
    for name, a, sh in want:
        if a is not None and a.shape != sh:
            raise invalid("%s has shape %s, expected %s (%s)" % (
                name, list(a.shape), list(sh), doc[name]))
    if len(a_kv.shape) != 3 or a_kv.shape[1:] != (shape.page_size, W):
        raise invalid("kv_cache has shape %s, expected [num_pages, %d, %d] "
                      "([num_pages, page_size, d_latent + d_rope])"
                      % (list(a_kv.shape), shape.page_size, W))
    return a_q, a_kv, a_pt, a_mask, a_out, a_lse, a_rows


def set_page_table_rows(t: "_lib.MlavTensors", a_rows: Any, a_pt: Any) -> None:
    """mlav_tensors.page_table_rows / page_table_num_rows of checked Arrs (a_rows None: both
    cleared, row b is request b's)."""
    if a_rows is None:
        t.page_table_rows, t.page_table_num_rows = None, 0
    else:
        t.page_table_rows = a_rows.ptr
        t.page_table_num_rows = c_int("page_table_num_rows", a_pt.shape[0], 64)


def verify(q: Tensor, kv_cache: Tensor, page_table: Tensor, tree_mask: Optional[Tensor] = None,
           *, q_indptr: Any, kv_lens: Any, softmax_scale: float, d_latent: int = 512,
           dtype: Any = None, out: Optional[Tensor] = None, lse: Union[Tensor, None, bool] = None,
           backend: Union[str, int] = "auto", context: Optional["Context"] = None,
           stream: Any = None, kv_dtype: Any = None, kv_scale: Any = None,
           page_table_rows: Optional[Tensor] = None,
           shard: Any = None) -> Tuple[Tensor, Optional[Tensor]]:
    """One shot: plan, run, free. Shapes come from the tensors (H and W from q, page_size from
    kv_cache, max_pages from page_table); d_rope = W - d_latent; dtype is inferred from q
    (float32, float16, torch.bfloat16) unless given (numpy uint16 BF16 bits need
    dtype="bf16"); kv_dtype is "fp8_e4m3" for a torch.float8_e4m3fn cache, else q's unless
    given (uint8 e4m3 bytes need kv_dtype="fp8_e4m3"), and an FP8 cache needs kv_scale (see
    Plan.run). page_table_rows: see Plan.run (page_table is then [num_rows, max_pages]).
    shard: (ranks, rank, stripe), this rank's KV shard (see Problem; page_table is the rank's).
    Convenient, not fast: an engine plans once and runs many times. Returns (out, lse)."""
    a_q, a_kv, a_pt = wrap("q", q), wrap("kv_cache", kv_cache), wrap("page_table", page_table)
    if len(a_q.shape) != 3:
        raise invalid("q has shape %s, expected [T, H, d_latent + d_rope]" % list(a_q.shape))
    if len(a_kv.shape) != 3:
        raise invalid("kv_cache has shape %s, expected [num_pages, page_size, d_latent + "
                      "d_rope]" % list(a_kv.shape))
    if len(a_pt.shape) != 2:
        raise invalid("page_table has shape %s, expected [B, max_pages] (or [num_rows, "
                      "max_pages] with page_table_rows)" % list(a_pt.shape))
    W = a_q.shape[2]
    dtype = dtype_name(dtype) if dtype is not None else infer_dtype(q)
    if kv_dtype is None and a_kv.dtype == "float8_e4m3fn":
        kv_dtype = "fp8_e4m3"
    elif kv_dtype is None and a_kv.dtype == "uint8":
        raise invalid("kv_cache is uint8: pass kv_dtype='fp8_e4m3' if it holds e4m3 bytes")
    device = a_q.device
    with Plan(num_heads=a_q.shape[1], d_latent=d_latent, d_rope=W - d_latent,
              softmax_scale=softmax_scale, dtype=dtype, page_size=a_kv.shape[1],
              q_indptr=q_indptr, kv_lens=kv_lens, max_pages=a_pt.shape[1],
              kv_dtype=kv_dtype, shard=shard, backend=backend, context=context,
              device=device if (device is not None and is_torch(q)) else None) as plan:
        return plan.run(q, kv_cache, page_table, tree_mask, out=out, lse=lse, stream=stream,
                        kv_scale=kv_scale, page_table_rows=page_table_rows)
