"""StepPlan.run as one torch operator, ``torch.ops.mlaverify.verify_step``, so that
torch.compile and piecewise CUDA graphs see a single opaque op (importing this module imports
torch; the rest of the package never does).

    out, lse = torch.ops.mlaverify.verify_step(q, kv_cache, page_table, tree_mask,
                                               plan.id, plan.d_latent)

q [max_tokens, H, Dl+Dr], kv_cache [num_pages, page_size, Dl+Dr], page_table
[max_batch, max_pages] int32, tree_mask [max_tokens, words] int32 or None; ``plan.id`` names a
live StepPlan (the op runs its last update's step). Returns fresh out [max_tokens, H, Dl] (q's
dtype) and lse [max_tokens, H] float32; rows past the step's tokens are uninitialised. The fake
(meta) implementation gives those shapes without running anything.

Registration: ``torch.library.custom_op`` with ``register_fake`` where torch has them (2.4+);
otherwise ``torch.library.Library`` with CPU, CUDA and Meta kernels (torch 1.13 .. 2.3). The
module attribute ``REGISTERED`` says whether the op exists, ``HOW`` how it was registered or why
not.
"""
from .steps import plan_by_id

try:  # pragma: no cover - depends on the environment
    import torch
except ImportError:  # pragma: no cover
    torch = None

OP = "mlaverify::verify_step"
REGISTERED = False
HOW = ""
_LIB = None  # the torch.library.Library object must stay alive


def _run(q, kv_cache, page_table, tree_mask, plan_id, d_latent):
    plan = plan_by_id(plan_id)
    T, H = q.shape[0], q.shape[1]
    out = torch.empty((T, H, d_latent), dtype=q.dtype, device=q.device)
    lse = torch.empty((T, H), dtype=torch.float32, device=q.device)
    plan.run(q, kv_cache, page_table, tree_mask, out=out, lse=lse)
    return out, lse


def _fake(q, kv_cache, page_table, tree_mask, plan_id, d_latent):
    T, H = q.shape[0], q.shape[1]
    return (q.new_empty((T, H, d_latent)),
            q.new_empty((T, H), dtype=torch.float32))


def _register():
    global REGISTERED, HOW, _LIB
    if torch is None:
        HOW = "torch is not importable"
        return
    lib_mod = getattr(torch, "library", None)
    try:
        if lib_mod is not None and hasattr(lib_mod, "custom_op"):
            from typing import Optional, Tuple

            def verify_step(q: torch.Tensor, kv_cache: torch.Tensor, page_table: torch.Tensor,
                            tree_mask: Optional[torch.Tensor], plan_id: int,
                            d_latent: int) -> Tuple[torch.Tensor, torch.Tensor]:
                return _run(q, kv_cache, page_table, tree_mask, plan_id, d_latent)

            op = lib_mod.custom_op(OP, mutates_args=())(verify_step)
            op.register_fake(_fake)
            REGISTERED, HOW = True, "torch.library.custom_op (torch %s)" % torch.__version__
            return
        if lib_mod is not None and hasattr(lib_mod, "Library"):
            lib = lib_mod.Library("mlaverify", "DEF")
            lib.define("verify_step(Tensor q, Tensor kv_cache, Tensor page_table, "
                       "Tensor? tree_mask, int plan_id, int d_latent) -> (Tensor, Tensor)")
            for key in ("CPU", "CUDA"):
                lib.impl("verify_step", _run, key)
            lib.impl("verify_step", _fake, "Meta")
            try:  # torch 1.13 routes meta tensors through AutogradMeta first (no fallthrough)
                lib.impl("verify_step", _fake, "AutogradMeta")
            except RuntimeError:  # pragma: no cover - a torch that has one already
                pass
            _LIB = lib
            REGISTERED = True
            HOW = "torch.library.Library (torch %s has no custom_op)" % torch.__version__
            return
        HOW = "torch %s has no torch.library" % torch.__version__
    except Exception as e:  # pragma: no cover - a torch whose library API differs again
        HOW = "registration failed on torch %s: %s: %s" % (
            torch.__version__, type(e).__name__, e)


_register()


def verify_step(plan, q, kv_cache, page_table, tree_mask=None):
    """torch.ops.mlaverify.verify_step for `plan` (a StepPlan); returns (out, lse)."""
    if not REGISTERED:
        raise RuntimeError("torch.ops.mlaverify.verify_step is not registered: " + HOW)
    return torch.ops.mlaverify.verify_step(q, kv_cache, page_table, tree_mask, plan.id,
                                           plan.d_latent)
