"""mlaverify: the verify attention of speculative decoding for MLA models, from Python.

A ctypes binding of libmlaverify (no compiler needed): plan once per batch shape, run every
step, on numpy arrays (host) or torch tensors (CPU, or CUDA on the current stream).

    import mlaverify as mv
    plan = mv.Plan(num_heads=64, softmax_scale=scale, dtype="bf16", page_size=1,
                   q_indptr=q_indptr, kv_lens=kv_lens)
    out, lse = plan.run(q, kv_cache, page_table, tree_mask)

The library is loaded on first use: $MLAVERIFY_LIBRARY, then next to this package, then the
system search path. ``mlaverify.sglang`` adapts SGLang-style verify inputs;
``mlaverify.bundle`` writes golden bundles (capture_bundle). ``StepPlan`` is a plan for
limits (engine steps: one plan, new lengths every step, capturable);
``mlaverify.sglang_backend`` the SGLang attention backend ``mlaverify`` on it (registered by
``mlaverify.sglang_plugin`` through SGLang's plugin entry points) and ``mlaverify.torch_ops``
its run as the torch ops ``mlaverify::verify_step`` and ``mlaverify::verify_step_out``. The
package is typed (PEP 561: ``py.typed``).
"""
from .api import (BACKENDS, DTYPES, Context, Plan, Problem, backend_compiled,
                  cuda_device_count, dtype_name, limits_max_batch, tree_mask_words, verify,
                  version)
from .bundle import capture_bundle, check_bundle, complete_bundle, read_bundle, write_bundle
from .errors import (CudaError, InvalidArgumentError, MlavError, NoDeviceError,
                     OutOfMemoryError, StepStatusError, UnsupportedError, WorkspaceError)
from .merge import cp_merge_states, merge_state, merge_states
from .tree import (accept_greedy, pack_mask, parents_from_tree_mask, tree_mask_from_parents,
                   unpack_mask)
from .steps import StepPlan
from ._lib import LibraryNotFoundError

__version__ = "0.4.0"

__all__ = [
    "BACKENDS", "DTYPES", "Context", "Plan", "Problem", "backend_compiled", "cuda_device_count",
    "dtype_name", "tree_mask_words", "verify", "version", "capture_bundle", "check_bundle",
    "complete_bundle", "read_bundle", "write_bundle", "CudaError", "InvalidArgumentError",
    "MlavError", "NoDeviceError", "OutOfMemoryError", "UnsupportedError", "WorkspaceError",
    "accept_greedy", "cp_merge_states", "merge_state", "merge_states", "pack_mask", "parents_from_tree_mask",
    "tree_mask_from_parents", "unpack_mask", "StepPlan", "StepStatusError",
    "LibraryNotFoundError",
]
