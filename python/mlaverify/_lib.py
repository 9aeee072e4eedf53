"""Finding and loading libmlaverify, and the ctypes mirror of include/mlaverify.h.

The library is loaded on first use (importing the package needs only the standard library),
from the first of:

1. the path in the environment variable ``MLAVERIFY_LIBRARY`` (a file, or a folder holding
   ``libmlaverify.so``); when it is set and does not load, that is an error, not a fallback;
2. next to this package (``mlaverify/libmlaverify.so*``, where a wheel or a copy puts it);
3. the library directory of the CMake install this package came with: ``cmake --install``
   writes ``_install_paths.py`` beside the package, recording that directory relative to the
   package (so the installed tree may move) and as the absolute path of the install prefix;
4. the system's search path (``ctypes.util.find_library("mlaverify")``, then the plain names,
   which the dynamic loader resolves through ``LD_LIBRARY_PATH`` and ``ldconfig``).

The structs below must match the header field for field (enums are C ``int``); the tests
check their sizes and offsets against a compiled C program and by round trips through the
library's validation.
"""
import ctypes
import ctypes.util
import os
import sys
import threading

#: The header version this binding was written for (MLAV_VERSION_NUMBER): the loaded library
#: must have the same major and at least this minor.
EXPECTED_VERSION = (0, 4, 0)

#: The soname (CHANGELOG.md: libmlaverify.so.0.MINOR while the major version is 0), the name the
#: wheel gives its one copy of the library.
SONAME = ("libmlaverify.so.%d.%d" % EXPECTED_VERSION[:2] if EXPECTED_VERSION[0] == 0
          else "libmlaverify.so.%d" % EXPECTED_VERSION[0])
_SONAMES = (SONAME, "libmlaverify.so", "libmlaverify.dylib", "mlaverify.dll")


class LibraryNotFoundError(OSError):
    """libmlaverify could not be found or loaded; the message lists every place tried."""


class MlavProblem(ctypes.Structure):
    """struct mlav_problem (host data read by mlav_plan_create)."""
    _fields_ = [
        ("num_heads", ctypes.c_int32),
        ("d_latent", ctypes.c_int32),
        ("d_rope", ctypes.c_int32),
        ("softmax_scale", ctypes.c_float),
        ("dtype", ctypes.c_int),            # mlav_dtype
        ("page_size", ctypes.c_int32),
        ("batch", ctypes.c_int32),
        ("q_indptr", ctypes.c_void_p),      # const int32_t * [B+1], host
        ("kv_lens", ctypes.c_void_p),       # const int32_t * [B], host
        ("max_pages", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int),         # mlav_dtype of kv_cache: 3 (FP8 E4M3) or dtype
                                            # (0 also means dtype)
        ("shard_ranks", ctypes.c_int32),    # KV shard (context-parallel decode): R, 0 or 1 = none
        ("shard_rank", ctypes.c_int32),     # r in [0, R)
        ("shard_stripe", ctypes.c_int32),   # I: KV rows per stripe, 0 means 1
    ]


class MlavTensors(ctypes.Structure):
    """struct mlav_tensors (the pointers of one run)."""
    _fields_ = [
        ("memory", ctypes.c_int),           # mlav_memory
        ("q", ctypes.c_void_p),
        ("kv_cache", ctypes.c_void_p),
        ("num_pages", ctypes.c_int64),
        ("page_table", ctypes.c_void_p),
        ("tree_mask", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("kv_scale", ctypes.c_float),       # FP8 caches: the scale as a value, used when
        ("kv_scale_ptr", ctypes.c_void_p),  # kv_scale_ptr (const float * [1] in `memory`) is NULL
        ("page_table_rows", ctypes.c_void_p),   # const int32_t * [B] in `memory`, or NULL
        ("page_table_num_rows", ctypes.c_int64),  # rows of page_table when page_table_rows is set
    ]


class MlavLimits(ctypes.Structure):
    """struct mlav_limits (the most one step of a plan for limits runs)."""
    _fields_ = [
        ("max_batch", ctypes.c_int32),
        ("max_tokens", ctypes.c_int32),
        ("max_q_len", ctypes.c_int32),
        ("max_kv_len", ctypes.c_int32),
    ]


class MlavLengths(ctypes.Structure):
    """struct mlav_lengths (one step's lengths, host or device)."""
    _fields_ = [
        ("memory", ctypes.c_int),           # mlav_memory
        ("batch", ctypes.c_int32),
        ("q_indptr", ctypes.c_void_p),      # const int32_t * [batch+1]
        ("kv_lens", ctypes.c_void_p),       # const int32_t * [batch]
    ]


_vp = ctypes.c_void_p
_i32 = ctypes.c_int32
_int = ctypes.c_int
_st = ctypes.c_int  # mlav_status

# name: (restype, argtypes)
_PROTOTYPES = {
    "mlav_version_number": (ctypes.c_uint, []),
    "mlav_version_string": (ctypes.c_char_p, []),
    "mlav_status_string": (ctypes.c_char_p, [_st]),
    "mlav_last_error": (ctypes.c_char_p, [_vp]),
    "mlav_backend_name": (ctypes.c_char_p, [_int]),
    "mlav_backend_from_name": (_st, [ctypes.c_char_p, ctypes.POINTER(_int)]),
    "mlav_dtype_size": (ctypes.c_size_t, [_int]),
    "mlav_dtype_name": (ctypes.c_char_p, [_int]),
    "mlav_dtype_alias": (ctypes.c_char_p, [ctypes.c_int32, ctypes.POINTER(_int)]),
    "mlav_dtype_parse": (_st, [ctypes.c_char_p, ctypes.POINTER(_int)]),
    "mlav_context_create": (_st, [ctypes.POINTER(_vp), _int]),
    "mlav_context_free": (None, [_vp]),
    "mlav_context_backend": (_int, [_vp]),
    "mlav_context_note": (ctypes.c_char_p, [_vp]),
    "mlav_plan_create": (_st, [_vp, ctypes.POINTER(MlavProblem), ctypes.POINTER(_vp)]),
    "mlav_plan_free": (None, [_vp]),
    "mlav_plan_backend": (_int, [_vp]),
    "mlav_plan_workspace_bytes": (ctypes.c_size_t, [_vp]),
    "mlav_plan_workspace_memory": (_int, [_vp]),
    "mlav_run": (_st, [_vp, ctypes.POINTER(MlavTensors), _vp, ctypes.c_size_t, _vp]),
    "mlav_verify": (_st, [_vp, ctypes.POINTER(MlavProblem), ctypes.POINTER(MlavTensors)]),
    "mlav_merge_states": (_st, [_i32, ctypes.c_int64, _i32, ctypes.POINTER(_vp),
                                ctypes.POINTER(_vp), _vp, _vp]),
    "mlav_merge_states_stacked": (_st, [_int, _int, _i32, ctypes.c_int64, _i32, _vp, _vp, _vp,
                                        _vp, _vp]),
    "mlav_merge_state_in_place": (_st, [_int, _int, ctypes.c_int64, _i32, _vp, _vp, _vp, _vp,
                                        _vp]),
    "mlav_nccl_compiled": (_int, []),
    "mlav_cp_merge_states": (_st, [_vp, _int, ctypes.c_int64, _i32, _vp, _vp, _vp, _vp, _vp, _vp,
                                   _vp]),
    "mlav_tree_mask_words": (_i32, [_i32]),
    "mlav_limits_max_batch": (_i32, []),
    "mlav_tree_mask_from_parents": (_st, [_i32, _vp, _i32, _vp]),
    "mlav_tree_accept_greedy": (_st, [_i32, _vp, _vp, _vp, _vp, ctypes.POINTER(_i32),
                                      ctypes.POINTER(_i32)]),
    "mlav_backend_compiled": (_int, [_int]),
    "mlav_cuda_device_count": (_int, []),
    "mlav_cuda_device_describe": (_st, [_int, ctypes.c_char_p, ctypes.c_size_t]),
    # engine steps (plans for limits)
    "mlav_plan_create_for_limits": (_st, [_vp, ctypes.POINTER(MlavProblem),
                                          ctypes.POINTER(MlavLimits), ctypes.POINTER(_vp)]),
    "mlav_plan_limits": (_st, [_vp, ctypes.POINTER(MlavLimits)]),
    "mlav_plan_update": (_st, [_vp, ctypes.POINTER(MlavLengths), _vp, ctypes.c_size_t, _vp]),
    "mlav_plan_step_status": (_st, [_vp, _vp, ctypes.c_size_t, _vp, ctypes.POINTER(_i32)]),
}

_lock = threading.Lock()
_lib = None
_path = None


def _candidates():
    """(description, path or name) in search order; see the module docstring."""
    env = os.environ.get("MLAVERIFY_LIBRARY")
    if env:
        if os.path.isdir(env):
            return [("MLAVERIFY_LIBRARY", os.path.join(env, n)) for n in _SONAMES[:2]], True
        return [("MLAVERIFY_LIBRARY", env)], True
    here = os.path.dirname(os.path.abspath(__file__))
    found = [("next to the package", os.path.join(here, n)) for n in _SONAMES]
    for libdir in _installed_libdirs(here):
        found += [("the CMake install's libdir", os.path.join(libdir, n)) for n in _SONAMES[:2]]
    name = ctypes.util.find_library("mlaverify")
    if name:
        found.append(("ctypes.util.find_library", name))
    found += [("system search path", n) for n in _SONAMES[:2]]
    return found, False


def _installed_libdirs(here):
    """The libdirs recorded by ``cmake --install`` (none for a pip-installed or source copy)."""
    try:
        from . import _install_paths
    except ImportError:
        return []
    dirs = []
    rel = getattr(_install_paths, "LIBDIR_FROM_PACKAGE", None)
    if rel:
        dirs.append(os.path.normpath(os.path.join(here, rel)))
    absolute = getattr(_install_paths, "LIBDIR", None)
    if absolute and os.path.normpath(absolute) not in dirs:
        dirs.append(os.path.normpath(absolute))
    return dirs


def _declare(lib):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def _check_version(lib, path):
    v = lib.mlav_version_number()
    major, minor = v // 10000, (v // 100) % 100
    # while the major version is 0 a minor release may change the structs (CHANGELOG.md): only
    # the same 0.MINOR will do; from 1.0 on, a later minor only adds
    want = EXPECTED_VERSION
    ok = major == want[0] and (minor == want[1] if major == 0 else minor >= want[1])
    if not ok:
        raise LibraryNotFoundError(
            "%s is libmlaverify %s, but this binding needs %d.%d%s"
            % (path, lib.mlav_version_string().decode(), want[0], want[1],
               ".x" if want[0] == 0 else " or a later %d.x" % want[0]))


def load():
    """The loaded library (a ctypes.CDLL with every prototype declared); loads it once."""
    global _lib, _path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        cands, from_env = _candidates()
        tried = []
        for where, path in cands:
            if os.sep in path and not os.path.exists(path):
                tried.append("%s: %s (no such file)" % (where, path))
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s: %s (%s)" % (where, path, e))
                continue
            try:
                _declare(lib)
            except AttributeError as e:
                tried.append("%s: %s (not libmlaverify: %s)" % (where, path, e))
                continue
            _check_version(lib, path)
            _lib, _path = lib, path
            return lib
        hint = ("" if from_env else
                "; build it (cmake --build build) and set MLAVERIFY_LIBRARY to "
                "build/libmlaverify.so, install the wheel (cmake --build build --target "
                "wheel), or install the library")
        raise LibraryNotFoundError("libmlaverify could not be loaded; tried " +
                                   "; ".join(tried) + hint)


def path():
    """The file (or name) the library was loaded from."""
    load()
    return _path


def text(b):
    """A C string from the library as str."""
    return b.decode("utf-8", "replace") if b is not None else ""


if sys.byteorder != "little":  # pragma: no cover - the bundle format and tests assume it
    raise ImportError("mlaverify supports little-endian hosts only")
