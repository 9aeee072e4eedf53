"""Merging attention states computed over disjoint KV ranges (mlav_merge_states_stacked,
mlav_merge_state_in_place), on numpy arrays and CPU torch tensors (host memory, a C loop) or
CUDA torch tensors (a kernel on the current stream: asynchronous, nothing allocated when out and
lse are given, capturable in a CUDA graph).

    out, lse = mv.merge_states(outs, lses)        # outs [N, ..., dim], lses [N, ...]
    mv.merge_state(v, s, v_other, s_other)        # (v, s) merged with the other state, in place

A state is (o, lse): o [..., dim] in float32, float16 or bfloat16 (numpy: uint16 raw BF16 bits
with dtype="bf16"), lse [...] float32 (natural log; -inf: an empty state). The merge rules are
the library's (a NaN lse makes its row NaN; all states empty: out 0, lse -inf).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from ._arrays import Arr, c_int, empty_like_kind, is_torch, torch_module, wrap
from .api import DTYPES, ELEMENTS, dtype_name
from .errors import check, invalid

_MEM_HOST, _MEM_DEVICE = 0, 1


def _stack(name: str, xs: Any) -> Any:
    """A stacked tensor of a sequence of states (a copy), or the tensor itself."""
    if isinstance(xs, (list, tuple)):
        if not xs:
            raise invalid("%s is empty: give at least one state" % name)
        shapes = [tuple(x.shape) if hasattr(x, "shape") else np.shape(x) for x in xs]
        for i, sh in enumerate(shapes):
            if sh != shapes[0]:
                raise invalid("%s[%d] %s and %s[0] %s do not match: every state has one shape"
                              % (name, i, list(sh), name, list(shapes[0])))
        if all(is_torch(x) for x in xs):
            return torch_module().stack(list(xs))
        if any(is_torch(x) for x in xs):
            raise invalid("%s mixes torch tensors and other arrays" % name)
        return np.stack([np.asarray(x) for x in xs])
    return xs


def _dtype_of(a: Arr, dtype: Any) -> str:
    if dtype is not None:
        d = dtype_name(dtype)
    elif a.dtype == "uint16":
        raise invalid("%s is uint16: pass dtype='bf16' if it holds raw BF16 bits" % a.name)
    else:
        try:
            d = dtype_name(a.dtype)
        except ValueError:
            raise invalid("%s is %s: states are float32, float16 or bfloat16"
                          % (a.name, a.dtype)) from None
    if a.dtype not in ELEMENTS[d]:
        raise invalid("%s holds %s elements, which are not %s" % (a.name, a.dtype, d))
    return d


def _where(arrs: Sequence[Arr]) -> Optional[int]:
    """The one place all of `arrs` live: None (host) or a CUDA device index."""
    first = arrs[0]
    for a in arrs[1:]:
        if a.device != first.device:
            raise invalid("%s is in %s but %s is in %s: a merge's tensors live together"
                          % (a.name, a.where, first.name, first.where))
    if first.device is not None and not first.is_torch:  # pragma: no cover - numpy is host
        raise invalid("device memory must be given as torch tensors")
    return first.device


def _call(device: Optional[int], fn, *args) -> None:
    """Call the library on host memory, or on `device`'s current stream."""
    lib = _lib.load()
    if device is None:
        check(getattr(lib, fn)(_MEM_HOST, *args, None))
        return
    torch = torch_module()
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device).cuda_stream
        check(getattr(lib, fn)(_MEM_DEVICE, *args, stream))


def merge_states(outs: Any, lses: Any, out: Any = None, lse: Any = None,
                 dtype: Any = None) -> Tuple[Any, Any]:
    """Merge N attention states over disjoint KV ranges into one (mlav_merge_states_stacked).

    outs   the states' outputs stacked, [N, ..., dim] (what an all-gather of the ranks' partial
           states gives), or a sequence of N arrays [..., dim] (stacked here: a copy)
    lses   [N, ...] float32, or a sequence of N arrays [...]
    out    optional output [..., dim] (may be the first state, outs[0] of a stacked tensor)
    lse    optional output [...] float32 (may be lses[0])
    dtype  "bf16" for numpy uint16 arrays of raw BF16 bits; else read from outs
    Host memory (numpy, CPU torch) or CUDA torch tensors, all in one place; outputs not given are
    allocated like outs. Returns (out, lse).
    """
    o = wrap("outs", _stack("outs", outs))
    s = wrap("lses", _stack("lses", lses))
    d = _dtype_of(o, dtype)
    if len(o.shape) < 2:
        raise invalid("outs must be [num_states, ..., dim], not %s" % list(o.shape))
    n, shape = o.shape[0], o.shape[1:]
    if s.shape != (n,) + shape[:-1] or s.dtype != "float32":
        raise invalid("lses is %s; the states' lse values are float32 %s (outs is %s)"
                      % (s.describe(), [n] + list(shape[:-1]), o.describe()))
    out_t = empty_like_kind(o, shape, o.dtype) if out is None else out
    lse_t = empty_like_kind(o, shape[:-1], "float32") if lse is None else lse
    po, pl = wrap("out", out_t, writable=True), wrap("lse", lse_t, writable=True)
    if po.shape != shape or po.dtype != o.dtype:
        raise invalid("out is %s; the merge of outs %s is %s %s"
                      % (po.describe(), o.describe(), o.dtype, list(shape)))
    if pl.shape != shape[:-1] or pl.dtype != "float32":
        raise invalid("lse is %s; the merge's lse is float32 %s" % (pl.describe(),
                                                                    list(shape[:-1])))
    device = _where([o, s, po, pl])
    rows = c_int("rows", int(np.prod(shape[:-1], dtype=np.int64)), 64)
    _call(device, "mlav_merge_states_stacked", DTYPES[d], c_int("num_states", n), rows,
          c_int("dim", shape[-1]), o.ptr, s.ptr, po.ptr, pl.ptr)
    return out_t, lse_t


def merge_state(out: Any, lse: Any, other_out: Any, other_lse: Any,
                dtype: Any = None) -> Tuple[Any, Any]:
    """Merge the state (other_out, other_lse) into (out, lse) in place
    (mlav_merge_state_in_place; FlashInfer's merge_state_in_place): out [..., dim] and lse [...]
    float32 are read and overwritten, other_out and other_lse (the same shapes) only read, and
    may not overlap them. Returns (out, lse)."""
    a, al = wrap("out", out, writable=True), wrap("lse", lse, writable=True)
    b, bl = wrap("other_out", other_out), wrap("other_lse", other_lse)
    d = _dtype_of(a, dtype)
    if len(a.shape) < 1:
        raise invalid("out must be [..., dim], not a scalar")
    if b.shape != a.shape or b.dtype != a.dtype:
        raise invalid("other_out is %s; out is %s" % (b.describe(), a.describe()))
    for x in (al, bl):
        if x.shape != a.shape[:-1] or x.dtype != "float32":
            raise invalid("%s is %s; the state's lse is float32 %s"
                          % (x.name, x.describe(), list(a.shape[:-1])))
    device = _where([a, al, b, bl])
    rows = c_int("rows", int(np.prod(a.shape[:-1], dtype=np.int64)), 64)
    _call(device, "mlav_merge_state_in_place", DTYPES[d], rows, c_int("dim", a.shape[-1]),
          a.ptr, al.ptr, b.ptr, bl.ptr)
    return out, lse


def cp_merge_states(out: Any, lse: Any, group: Any = None, gathered: Any = None,
                    merged_out: Any = None, merged_lse: Any = None) -> Tuple[Any, Any]:
    """Context-parallel verify's exchange over a torch.distributed process group: each rank
    gives the partial state of the KV rows it holds, out [..., dim] and lse [...] float32 (a
    sharded plan's outputs), and every rank receives the merged state, the verify of the whole
    cache. An all-gather of the states, then merge_states on the gathered [R, ...] stacks.

    group       the process group (default: the world); NCCL for CUDA tensors, gloo for CPU
    gathered    optional scratch (outs [R, ..., dim] like out, lses [R, ...] float32), so that
                nothing is allocated (a captured CUDA graph needs that)
    merged_out, merged_lse   optional outputs (may be out and lse themselves)
    Returns (merged_out, merged_lse). The C library's own NCCL exchange is
    mlav_cp_merge_states (an ncclComm_t). Every rank must call it with the same shapes.
    """
    torch = torch_module()
    if torch is None or not is_torch(out) or not is_torch(lse):
        raise invalid("cp_merge_states exchanges torch tensors over torch.distributed")
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        raise invalid("cp_merge_states needs an initialized torch.distributed process group")
    ranks = dist.get_world_size(group)
    if gathered is None:
        g_out = out.new_empty((ranks,) + tuple(out.shape))
        g_lse = lse.new_empty((ranks,) + tuple(lse.shape))
    else:
        g_out, g_lse = gathered
        if tuple(g_out.shape) != (ranks,) + tuple(out.shape) or g_out.dtype != out.dtype:
            raise invalid("gathered[0] is %s %s; the stack of %d states of out is %s %s"
                          % (g_out.dtype, list(g_out.shape), ranks, out.dtype,
                             [ranks] + list(out.shape)))
        if tuple(g_lse.shape) != (ranks,) + tuple(lse.shape) or g_lse.dtype != torch.float32:
            raise invalid("gathered[1] is %s %s; the stack of %d lse is float32 %s"
                          % (g_lse.dtype, list(g_lse.shape), ranks, [ranks] + list(lse.shape)))
        if not (g_out.is_contiguous() and g_lse.is_contiguous()):
            raise invalid("gathered must be two contiguous tensors (an all-gather writes them "
                          "whole)")
        if g_out.device != out.device or g_lse.device != out.device:
            raise invalid("gathered is on %s and %s; out is on %s"
                          % (g_out.device, g_lse.device, out.device))
    # an all-gather copies: the states travel as bytes, so every dtype goes (gloo has no bf16)
    o, s = out.contiguous().view(torch.uint8), lse.contiguous().view(torch.uint8)
    go, gs = g_out.view(torch.uint8), g_lse.view(torch.uint8)
    if dist.get_backend(group) == "nccl":
        dist.all_gather_into_tensor(go, o, group=group)
        dist.all_gather_into_tensor(gs, s, group=group)
    else:  # gloo and others: a list of views of the stacks, written in place
        dist.all_gather(list(go.unbind(0)), o, group=group)
        dist.all_gather(list(gs.unbind(0)), s, group=group)
    return merge_states(g_out, g_lse, out=merged_out, lse=merged_lse)
