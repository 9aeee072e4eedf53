"""Exceptions: every failure carries the library's status name and its sentence.

``MlavError`` is the base; a subclass per status lets callers catch the kind they care about,
and the ones that mean "you passed something wrong" are also ``ValueError`` (or
``MemoryError``), so generic handlers work too. Checks the binding makes itself (dtype, shape,
contiguity, residency) raise the same classes with the status the library would give.
"""
from __future__ import annotations

from . import _lib

OK = 0
ERR_INVALID_ARG = 1
ERR_UNSUPPORTED = 2
ERR_OUT_OF_MEMORY = 3
ERR_WORKSPACE = 4
ERR_NO_DEVICE = 5
ERR_CUDA = 6
# 7 and 8 are the C tools' statuses (a malformed bundle, a file error): never the library's
ERR_INTERNAL = 9

_NAMES = {
    OK: "MLAV_OK", ERR_INVALID_ARG: "MLAV_ERR_INVALID_ARG",
    ERR_UNSUPPORTED: "MLAV_ERR_UNSUPPORTED", ERR_OUT_OF_MEMORY: "MLAV_ERR_OUT_OF_MEMORY",
    ERR_WORKSPACE: "MLAV_ERR_WORKSPACE", ERR_NO_DEVICE: "MLAV_ERR_NO_DEVICE",
    ERR_CUDA: "MLAV_ERR_CUDA",
    ERR_INTERNAL: "MLAV_ERR_INTERNAL",
}


class MlavError(RuntimeError):
    """A mlaverify failure.

    Attributes: ``status`` (the mlav_status value), ``status_name`` ("MLAV_ERR_INVALID_ARG"),
    ``sentence`` (mlav_last_error(): what was wrong). ``str(e)`` is "STATUS_NAME: sentence".
    """

    def __init__(self, status: int, sentence: str) -> None:
        self.status = int(status)
        self.status_name = _NAMES.get(self.status, "MLAV_ERR_UNKNOWN(%d)" % self.status)
        self.sentence = sentence
        super().__init__("%s: %s" % (self.status_name, sentence))


class InvalidArgumentError(MlavError, ValueError):
    """MLAV_ERR_INVALID_ARG: a null pointer, bad length or shape, bad page id, wrong dtype."""


class UnsupportedError(MlavError):
    """MLAV_ERR_UNSUPPORTED: valid, but not on this backend (dims, residency, dtype)."""


class OutOfMemoryError(MlavError, MemoryError):
    """MLAV_ERR_OUT_OF_MEMORY: a host or device allocation failed."""


class WorkspaceError(MlavError, ValueError):
    """MLAV_ERR_WORKSPACE: the workspace is missing, too small, misaligned or misplaced."""


class NoDeviceError(MlavError):
    """MLAV_ERR_NO_DEVICE: CUDA asked for, not built in or no cc >= 8.0 device."""


class CudaError(MlavError):
    """MLAV_ERR_CUDA: a CUDA call failed; the sentence names the call and file:line."""


class StepStatusError(InvalidArgumentError):
    """MLAV_ERR_INVALID_ARG from StepPlan.step_status(): the last update refused a request.
    ``bad_request`` is its index (an int), or the step's batch when q_indptr itself was
    refused (nothing ran)."""

    def __init__(self, sentence: str, bad_request: int) -> None:
        super().__init__(ERR_INVALID_ARG, sentence)
        self.bad_request = int(bad_request)


_CLASSES = {
    ERR_INVALID_ARG: InvalidArgumentError, ERR_UNSUPPORTED: UnsupportedError,
    ERR_OUT_OF_MEMORY: OutOfMemoryError, ERR_WORKSPACE: WorkspaceError,
    ERR_NO_DEVICE: NoDeviceError, ERR_CUDA: CudaError,
}


def error(status: int, sentence: str) -> MlavError:
    """The exception for `status` with `sentence` (not raised)."""
    return _CLASSES.get(int(status), MlavError)(status, sentence)


def invalid(sentence: str) -> InvalidArgumentError:
    """An InvalidArgumentError raised by the binding's own checks."""
    return InvalidArgumentError(ERR_INVALID_ARG, sentence)


def check(status: int) -> None:
    """Raise the exception for a failed library call (call right after it, on the same
    thread: the sentence is kept per thread)."""
    if status != OK:
        lib = _lib.load()
        raise error(status, _lib.text(lib.mlav_last_error(None)))
