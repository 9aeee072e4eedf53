"""SGLang's own files, loaded for conformance tests from the folder in $SGLANG_SRC (a pinned
subset of SGLang: ../shared/sglang beside the checkout, see its SOURCE.md).

Those files import far more of SGLang, and GPU-only packages, than the subset holds. Every module
under ``sglang.`` that the subset lacks, and the few third-party packages below, are replaced by
permissive stubs: any attribute is a stub class, calling one gives a falsy stub (or, called with
one function, that function: a decorator that changes nothing). A handful of stubbed names whose
behaviour the tests reach are given real (CPU) implementations in OVERRIDES. The modules of the
subset themselves run unmodified.

    with sglang_modules() as sg:       # None when SGLANG_SRC is unset
        hybrid = sg.module("sglang.srt.layers.attention.hybrid_attn_backend")

On exit every module loaded inside is dropped from sys.modules again, so the rest of the test
session never sees SGLang or a stub.
"""
import contextlib
import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types

# third-party packages the subset imports that are GPU-only or absent from the test machine
STUBBED_PACKAGES = ("triton", "tqdm", "msgspec", "sgl_kernel", "flashinfer", "deep_gemm",
                    "torch_memory_saver", "cuda", "aiter", "zmq", "psutil", "orjson", "pybase64",
                    "requests", "setproctitle", "transformers", "huggingface_hub", "safetensors",
                    "einops", "uvloop", "fastapi", "pydantic", "numba", "xgrammar", "outlines",
                    "llguidance", "openai", "tiktoken", "sentencepiece", "prometheus_client",
                    "partial_json_parser", "compressed_tensors", "interegular", "datasets",
                    "blobfile", "modelscope", "tabulate", "ninja", "pynvml", "nvtx",
                    "tvm_ffi", "cutlass", "quack")


class _StubMeta(type):
    """Classes whose every unknown attribute is another stub class."""

    def __getattr__(cls, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __call__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and \
                not isinstance(args[0], (_StubBase, _StubMeta)):
            return args[0]  # used as a decorator: the function unchanged
        return super().__call__(*args, **kwargs)

    def __iter__(cls):
        return iter(())

    def __getitem__(cls, key):
        return cls

    def __or__(cls, other):
        return cls

    __ror__ = __or__


class _StubBase(metaclass=_StubMeta):
    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _StubBase()

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and \
                not isinstance(args[0], (_StubBase, _StubMeta)):
            return args[0]
        return _StubBase()

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stub_class(name):
    return _StubMeta(str(name), (_StubBase,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = "%s.%s" % (self.__name__, name)
        if full in OVERRIDES:
            value = OVERRIDES[full]
        else:
            value = _stub_class(name)
        setattr(self, name, value)
        return value


def _no_tc_piecewise_context():
    return None


def _set_mla_kv_buffer(dst, loc, nope, rope):
    """The pool's MLA write (a Triton kernel in SGLang): row loc = [nope | rope]."""
    import torch
    n = loc.shape[0]
    dst[loc.long()] = torch.cat([nope.reshape(n, 1, -1), rope.reshape(n, 1, -1)], -1)


class _Parallel:
    """runtime_context.get_parallel(): one rank, no DCP / DP attention."""
    dcp_enabled = False
    attn_dcp_size = 1
    attn_dcp_rank = 0
    attn_tp_size = 1
    attn_tp_rank = 0
    tp_size = 1
    tp_rank = 0


class _Struct:
    """msgspec.Struct: keyword fields, class options ignored."""

    def __init_subclass__(cls, **options):
        pass

    def __init__(self, **fields):
        for k, v in type(self).__dict__.items():
            if not k.startswith("_") and not callable(v):
                setattr(self, k, v)
        self.__dict__.update(fields)


# stubbed names whose behaviour the tests reach: a CPU implementation each
OVERRIDES = {
    "sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph."
    "get_tc_piecewise_forward_context": _no_tc_piecewise_context,
    "sglang.srt.mem_cache.utils.set_mla_kv_buffer_triton": _set_mla_kv_buffer,
    "sglang.srt.runtime_context.get_parallel": lambda: _Parallel,
    "msgspec.Struct": _Struct,
    # a plain MLA model: none of the hybrid-attention configs
    "sglang.srt.configs.hybrid_arch.hybrid_gdn_config": lambda model_config: None,
    "sglang.srt.configs.hybrid_arch.mambaish_config": lambda model_config: None,
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Stubs sglang.* modules the subset lacks (first on the meta path) and the packages of
    STUBBED_PACKAGES (whatever is installed: the tests must not depend on them)."""

    def __init__(self, root):
        self.root = root

    def _real(self, fullname):
        rel = os.path.join(self.root, *fullname.split("."))
        return os.path.isfile(rel + ".py") or os.path.isdir(rel)

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top == "sglang":
            if self._real(fullname):
                return None
        elif top not in STUBBED_PACKAGES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


class SGLang:
    """The loaded subset: module(name) imports one of its modules."""

    def __init__(self, root):
        self.root = root

    @staticmethod
    def module(name):
        return importlib.import_module(name)


def source_root():
    """$SGLANG_SRC's python/ folder, or None when the variable is unset."""
    src = os.environ.get("SGLANG_SRC")
    if not src:
        return None
    root = os.path.join(os.path.abspath(src), "python")
    if not os.path.isfile(os.path.join(root, "sglang", "srt", "layers", "attention",
                                       "base_attn_backend.py")):
        raise RuntimeError("SGLANG_SRC=%s holds no python/sglang/srt/layers/attention/"
                           "base_attn_backend.py" % src)
    return root


def _ours(name):
    top = name.split(".")[0]
    return top == "sglang" or top in STUBBED_PACKAGES


@contextlib.contextmanager
def sglang_modules():
    """Yield an SGLang loader (None without SGLANG_SRC); undo every import on exit."""
    root = source_root()
    if root is None:
        yield None
        return
    saved = {k: v for k, v in sys.modules.items() if _ours(k)}
    for k in saved:
        del sys.modules[k]
    finder = _Finder(root)
    sys.meta_path.insert(0, finder)
    sys.path.insert(0, root)
    importlib.invalidate_caches()
    try:
        yield SGLang(root)
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(root)
        for k in [k for k in sys.modules if _ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
        importlib.invalidate_caches()
