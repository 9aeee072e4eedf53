"""numpy arrays and torch tensors as the library sees them: pointer, shape, dtype, residency.

torch is never imported here: a torch tensor can only exist once the caller has imported torch,
so ``sys.modules`` tells whether an object may be one. Nothing is copied or converted: a tensor
the library would misread (wrong dtype, not contiguous, misaligned, wrong byte order) is an
error, because a silent copy would cost time on every step and break CUDA-graph capture.
"""
import operator
import sys

import numpy as np

from .errors import invalid


def torch_module():
    """The torch module if the caller imported it, else None."""
    return sys.modules.get("torch")


def is_torch(x):
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


class Arr:
    """One tensor argument: ``obj`` (the caller's object), ``ptr``, ``shape``, ``dtype`` (a
    name: "float32", "bfloat16", "uint16", ...), ``device`` (None for host memory, else the CUDA
    device index) and ``is_torch``."""

    __slots__ = ("name", "obj", "ptr", "shape", "dtype", "device", "is_torch")

    def __init__(self, name, obj, ptr, shape, dtype, device, torch_):
        self.name, self.obj, self.ptr, self.shape = name, obj, ptr, tuple(shape)
        self.dtype, self.device, self.is_torch = dtype, device, torch_

    @property
    def where(self):
        return "host" if self.device is None else "cuda:%d" % self.device

    def describe(self):
        return "%s %s %s" % (self.where, self.dtype, list(self.shape))


def wrap(name, x, writable=False):
    """Arr of a numpy array or torch tensor, checked to be readable by C as a dense row-major
    buffer; `writable` for outputs."""
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise invalid("%s (numpy %s %s) is not C-contiguous; pass np.ascontiguousarray(%s)"
                          % (name, x.dtype, list(x.shape), name))
        if not x.flags.aligned:
            raise invalid("%s is not aligned to its element size" % name)
        if x.dtype.byteorder == ">":
            raise invalid("%s is big-endian (%s); the library reads native little-endian"
                          % (name, x.dtype.str))
        if writable and not x.flags.writeable:
            raise invalid("%s is read-only but is written" % name)
        return Arr(name, x, x.ctypes.data, x.shape, x.dtype.name, None, False)
    if is_torch(x):
        torch = torch_module()
        if x.layout != torch.strided:
            raise invalid("%s is a %s torch tensor; only dense (strided) tensors are accepted"
                          % (name, x.layout))
        if x.device.type == "cpu":
            device = None
        elif x.device.type == "cuda":
            device = x.device.index if x.device.index is not None else torch.cuda.current_device()
        else:
            raise invalid("%s is on device %s; mlaverify takes cpu or cuda tensors"
                          % (name, x.device))
        if not x.is_contiguous():
            raise invalid("%s (torch %s %s, strides %s) is not contiguous; pass %s.contiguous()"
                          % (name, x.dtype, list(x.shape), list(x.stride()), name))
        if x.data_ptr() % x.element_size():  # torch.from_numpy of a misaligned view
            raise invalid("%s is not aligned to its element size" % name)
        if writable and x.requires_grad and x.is_leaf:
            raise invalid("%s requires grad and cannot be written in place" % name)
        dtype = str(x.dtype).replace("torch.", "")
        return Arr(name, x, x.data_ptr(), x.shape, dtype, device, True)
    raise invalid("%s must be a numpy array or a torch tensor, not %s"
                  % (name, type(x).__name__))


_INT_RANGES = {32: (-2**31, 2**31 - 1), 64: (-2**63, 2**63 - 1)}


def as_int(name, x):
    """`x` as a Python int: an int, a numpy integer or anything with ``__index__``; a bool, a
    float (even 16.0), a string or anything else is refused (int() would truncate 1.5 to 1 and
    read "7" as 7)."""
    if isinstance(x, (bool, np.bool_)):
        raise invalid("%s = %r must be an integer, not a bool" % (name, x))
    try:
        return operator.index(x)
    except TypeError:
        raise invalid("%s = %r must be an integer" % (name, x)) from None


def c_int(name, x, bits=32):
    """`x` (see as_int), checked to fit the C field's int32 (or int64, bits=64) before it
    reaches ctypes, which would silently wrap it (2**32 + 4 becomes 4)."""
    v = as_int(name, x)
    lo, hi = _INT_RANGES[bits]
    if not lo <= v <= hi:
        raise invalid("%s = %d does not fit the C field's int%d [%d, %d]" % (name, v, bits, lo, hi))
    return v


def host_int32(name, x, shape=None):
    """A small host int32 array from a list, numpy array or torch tensor (a CUDA tensor is
    copied to the host: that synchronizes its stream). Values must fit int32. The result is
    C-contiguous and aligned: a misaligned int32 view (a slice of a byte buffer) is copied, as C
    reads int32_t through an aligned pointer."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise invalid("%s must hold integers, not %s" % (name, a.dtype))
    if a.size and (a.min() < -2**31 or a.max() >= 2**31):
        raise invalid("%s does not fit int32" % name)
    a = np.require(a, dtype=np.int32, requirements=("C", "A"))
    if shape is not None and a.shape != tuple(shape):
        raise invalid("%s has shape %s, expected %s" % (name, list(a.shape), list(shape)))
    return a


def empty_like_kind(ref, shape, dtype):
    """An uninitialised output of `shape` and dtype name `dtype`, of the same kind (numpy or
    torch) and on the same device as the Arr `ref`."""
    if ref.is_torch:
        torch = torch_module()
        return torch.empty(tuple(shape), dtype=getattr(torch, dtype), device=ref.obj.device)
    return np.empty(tuple(shape), dtype=np.dtype(dtype))
