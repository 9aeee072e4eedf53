"""StepPlan.run as one torch operator, ``torch.ops.mlaverify.verify_step``, so that
torch.compile and piecewise CUDA graphs see a single opaque op (importing this module imports
torch; the rest of the package never does).

    out, lse = torch.ops.mlaverify.verify_step(q, kv_cache, page_table, tree_mask,
                                               plan.id, plan.d_latent)
    # an FP8 KV cache (StepPlan kv_dtype="fp8_e4m3") also takes its scale, a float or a
    # 1-element float32 tensor: ..., plan.d_latent, kv_scale=s) / kv_scale_tensor=t)

q [max_tokens, H, Dl+Dr], kv_cache [num_pages, page_size, Dl+Dr], page_table
[max_batch, max_pages] int32, tree_mask [max_tokens, words] int32 or None; ``plan.id`` names a
live StepPlan (the op runs its last update's step). Returns fresh out [max_tokens, H, Dl] (q's
dtype) and lse [max_tokens, H] float32; rows past the step's tokens are uninitialised. The fake
(meta) implementation gives those shapes without running anything.

Registration: ``torch.library.Library`` with CPU and CUDA kernels and a fake one through
``torch.library.register_fake`` (2.4+; ``impl_abstract`` 2.2, 2.3), a Meta kernel before; a
``torch.library.custom_op`` dispatches slower (see _register). The module attribute
``REGISTERED`` says whether the op exists, ``HOW`` how it was registered or why not.
"""
from .steps import _PLANS, plan_by_id

try:  # pragma: no cover - depends on the environment
    import torch
except ImportError:  # pragma: no cover
    torch = None

OP = "mlaverify::verify_step"
REGISTERED = False
HOW = ""
_LIB = None  # the torch.library.Library object must stay alive
_OP = None   # torch.ops.mlaverify.verify_step, looked up once


def _run(q, kv_cache, page_table, tree_mask, plan_id, d_latent, kv_scale=None,
         kv_scale_tensor=None):
    plan = _PLANS.get(plan_id)
    if plan is None:
        plan = plan_by_id(plan_id)  # raises the sentence (or takes an int-like id)
    shape = q.shape
    dev = q.device
    out = torch.empty((shape[0], shape[1], d_latent), dtype=q.dtype, device=dev)
    lse = torch.empty((shape[0], shape[1]), dtype=torch.float32, device=dev)
    plan.run(q, kv_cache, page_table, tree_mask, out=out, lse=lse,
             kv_scale=kv_scale_tensor if kv_scale_tensor is not None else kv_scale)
    return out, lse


def _fake(q, kv_cache, page_table, tree_mask, plan_id, d_latent, kv_scale=None,
          kv_scale_tensor=None):
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
        # torch.library.Library with a fake kernel on every torch that has one: its dispatch
        # costs a few microseconds less per call than a custom_op's (python -m
        # mlaverify.overhead; 26 against 30 us in inference mode on an H200 host, torch 2.11)
        if lib_mod is not None and hasattr(lib_mod, "Library"):
            lib = lib_mod.Library("mlaverify", "DEF")
            lib.define("verify_step(Tensor q, Tensor kv_cache, Tensor page_table, "
                       "Tensor? tree_mask, int plan_id, int d_latent, float? kv_scale=None, "
                       "Tensor? kv_scale_tensor=None) -> (Tensor, Tensor)")
            for key in ("CPU", "CUDA"):
                lib.impl("verify_step", _run, key)
            fake = getattr(lib_mod, "register_fake", None) or \
                getattr(lib_mod, "impl_abstract", None)
            if fake is not None:  # torch >= 2.4 (2.2: impl_abstract): also the Meta kernel
                fake(OP, _fake, lib=lib)
                how = "torch.library.Library + %s" % fake.__name__
            else:
                lib.impl("verify_step", _fake, "Meta")
                try:  # torch 1.13 routes meta tensors through AutogradMeta first
                    lib.impl("verify_step", _fake, "AutogradMeta")
                except RuntimeError:  # pragma: no cover - a torch that has one already
                    pass
                how = "torch.library.Library + Meta kernel"
            _LIB = lib
            REGISTERED = True
            HOW = "%s (torch %s)" % (how, torch.__version__)
            return
        if lib_mod is not None and hasattr(lib_mod, "custom_op"):  # pragma: no cover
            from typing import Optional, Tuple

            def verify_step(q: torch.Tensor, kv_cache: torch.Tensor, page_table: torch.Tensor,
                            tree_mask: Optional[torch.Tensor], plan_id: int,
                            d_latent: int, kv_scale: Optional[float] = None,
                            kv_scale_tensor: Optional[torch.Tensor] = None
                            ) -> Tuple[torch.Tensor, torch.Tensor]:
                return _run(q, kv_cache, page_table, tree_mask, plan_id, d_latent, kv_scale,
                            kv_scale_tensor)

            op = lib_mod.custom_op(OP, mutates_args=())(verify_step)
            op.register_fake(_fake)
            REGISTERED, HOW = True, "torch.library.custom_op (torch %s)" % torch.__version__
            return
        HOW = "torch %s has no torch.library" % torch.__version__
    except Exception as e:  # pragma: no cover - a torch whose library API differs again
        HOW = "registration failed on torch %s: %s: %s" % (
            torch.__version__, type(e).__name__, e)


_register()
if REGISTERED:
    _OP = torch.ops.mlaverify.verify_step


def verify_step(plan, q, kv_cache, page_table, tree_mask=None, kv_scale=None):
    """torch.ops.mlaverify.verify_step for `plan` (a StepPlan); returns (out, lse). kv_scale:
    an FP8 cache's scale, a float or a 1-element float32 tensor (None: not passed)."""
    op = _OP
    if op is None:
        raise RuntimeError("torch.ops.mlaverify.verify_step is not registered: " + HOW)
    if kv_scale is None:
        return op(q, kv_cache, page_table, tree_mask, plan.id, plan.d_latent)
    if isinstance(kv_scale, torch.Tensor):
        return op(q, kv_cache, page_table, tree_mask, plan.id, plan.d_latent,
                  kv_scale_tensor=kv_scale)
    return op(q, kv_cache, page_table, tree_mask, plan.id, plan.d_latent,
              kv_scale=float(kv_scale))
