"""StepPlan.run as torch operators, ``torch.ops.mlaverify.verify_step`` (returns fresh out and
lse) and ``torch.ops.mlaverify.verify_step_out`` (writes the out and lse it is given, so a
captured layer allocates nothing), so that torch.compile and piecewise CUDA graphs see a single
opaque op (importing this module imports torch; the rest of the package never does).

    out, lse = torch.ops.mlaverify.verify_step(q, kv_cache, page_table, tree_mask,
                                               plan.id, plan.d_latent)
    torch.ops.mlaverify.verify_step_out(q, kv_cache, page_table, tree_mask, plan.id, out, lse)
    # an FP8 KV cache (StepPlan kv_dtype="fp8_e4m3") also takes its scale, a float or a
    # 1-element float32 tensor: ..., kv_scale=s) / kv_scale_tensor=t); a shared page table
    # its rows: ..., page_table_rows=rows)

q [max_tokens, H, Dl+Dr], kv_cache [num_pages, page_size, Dl+Dr], page_table
[max_batch, max_pages] int32 (with page_table_rows [max_batch] int32: [num_rows, max_pages]),
tree_mask [max_tokens, words] int32 or None; ``plan.id`` names a live StepPlan (the op runs its
last update's step). verify_step returns fresh out [max_tokens, H, Dl] (q's dtype) and lse
[max_tokens, H] float32 whose rows past the step's tokens are uninitialised; verify_step_out
writes the step's rows of out and lse (declared mutated: ``Tensor(a!)``) and returns nothing.
The fake (meta) implementations give those shapes, or nothing, without running anything.
``verify_step(plan, ...)`` below calls either.

The state merges of ``mlaverify.merge`` are ops too: ``torch.ops.mlaverify.merge_states(outs,
lses)`` (outs [N, ..., dim], lses [N, ...] float32; returns fresh out and lse) and
``torch.ops.mlaverify.merge_state_in_place(out, lse, other_out, other_lse)`` (merges the other
state into out and lse, declared mutated; returns nothing, allocates nothing), on the current
stream for CUDA tensors (capturable) and on the host for CPU ones.

Registration: ``torch.library.Library`` with CPU and CUDA kernels and fake ones through
``torch.library.register_fake`` (2.4+; ``impl_abstract`` 2.2, 2.3), Meta kernels before; a
``torch.library.custom_op`` dispatches slower (see _register; through it only the verify ops are
made). The module attribute
``REGISTERED`` says whether the ops exist, ``HOW`` how they were registered or why not.
"""
from typing import Any, Tuple  # no `from __future__ import annotations`: custom_op reads
                               # the hints of the functions below as objects

from .api import real_arg
from .errors import invalid
from .merge import merge_state, merge_states
from .steps import _PLANS, plan_by_id

try:  # pragma: no cover - depends on the environment
    import torch
except ImportError:  # pragma: no cover
    torch = None

OP = "mlaverify::verify_step"
OP_OUT = "mlaverify::verify_step_out"
REGISTERED = False
HOW = ""
_LIB = None     # the torch.library.Library object must stay alive
_OP = None      # torch.ops.mlaverify.verify_step, looked up once
_OP_OUT = None  # torch.ops.mlaverify.verify_step_out

_SCHEMA = ("verify_step(Tensor q, Tensor kv_cache, Tensor page_table, Tensor? tree_mask, "
           "int plan_id, int d_latent, float? kv_scale=None, Tensor? kv_scale_tensor=None, "
           "Tensor? page_table_rows=None) -> (Tensor, Tensor)")
# the state merges (mlaverify.merge) as ops: CPU tensors on the host, CUDA tensors on the
# current stream (capturable; merge_state_in_place allocates nothing)
MERGE_OP = "mlaverify::merge_states"
MERGE_OP_IN_PLACE = "mlaverify::merge_state_in_place"
_SCHEMA_MERGE = "merge_states(Tensor outs, Tensor lses) -> (Tensor, Tensor)"
_SCHEMA_MERGE_IN_PLACE = ("merge_state_in_place(Tensor(a!) out, Tensor(b!) lse, "
                          "Tensor other_out, Tensor other_lse) -> ()")
_SCHEMA_OUT = ("verify_step_out(Tensor q, Tensor kv_cache, Tensor page_table, "
               "Tensor? tree_mask, int plan_id, Tensor(a!) out, Tensor(b!) lse, "
               "float? kv_scale=None, Tensor? kv_scale_tensor=None, "
               "Tensor? page_table_rows=None) -> ()")


def _plan(plan_id):
    plan = _PLANS.get(plan_id)
    return plan if plan is not None else plan_by_id(plan_id)  # raises the sentence


def _run(q, kv_cache, page_table, tree_mask, plan_id, d_latent, kv_scale=None,
         kv_scale_tensor=None, page_table_rows=None):
    plan = _plan(plan_id)
    shape = q.shape
    dev = q.device
    out = torch.empty((shape[0], shape[1], d_latent), dtype=q.dtype, device=dev)
    lse = torch.empty((shape[0], shape[1]), dtype=torch.float32, device=dev)
    plan.run(q, kv_cache, page_table, tree_mask, out=out, lse=lse,
             kv_scale=kv_scale_tensor if kv_scale_tensor is not None else kv_scale,
             page_table_rows=page_table_rows)
    return out, lse


def _run_out(q, kv_cache, page_table, tree_mask, plan_id, out, lse, kv_scale=None,
             kv_scale_tensor=None, page_table_rows=None):
    _plan(plan_id).run(q, kv_cache, page_table, tree_mask, out=out, lse=lse,
                       kv_scale=kv_scale_tensor if kv_scale_tensor is not None else kv_scale,
                       page_table_rows=page_table_rows)


def _fake(q, kv_cache, page_table, tree_mask, plan_id, d_latent, kv_scale=None,
          kv_scale_tensor=None, page_table_rows=None):
    T, H = q.shape[0], q.shape[1]
    return (q.new_empty((T, H, d_latent)),
            q.new_empty((T, H), dtype=torch.float32))


def _fake_out(q, kv_cache, page_table, tree_mask, plan_id, out, lse, kv_scale=None,
              kv_scale_tensor=None, page_table_rows=None):
    return None


def _merge(outs, lses):
    return merge_states(outs, lses)


def _merge_fake(outs, lses):
    return outs.new_empty(outs.shape[1:]), lses.new_empty(lses.shape[1:])


def _merge_in_place(out, lse, other_out, other_lse):
    merge_state(out, lse, other_out, other_lse)


def _merge_in_place_fake(out, lse, other_out, other_lse):
    return None


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
            fake = getattr(lib_mod, "register_fake", None) or \
                getattr(lib_mod, "impl_abstract", None)
            for schema, name, op, run, fake_fn in (
                    (_SCHEMA, "verify_step", OP, _run, _fake),
                    (_SCHEMA_OUT, "verify_step_out", OP_OUT, _run_out, _fake_out),
                    (_SCHEMA_MERGE, "merge_states", MERGE_OP, _merge, _merge_fake),
                    (_SCHEMA_MERGE_IN_PLACE, "merge_state_in_place", MERGE_OP_IN_PLACE,
                     _merge_in_place, _merge_in_place_fake)):
                lib.define(schema)
                for key in ("CPU", "CUDA"):
                    lib.impl(name, run, key)
                if fake is not None:  # torch >= 2.4 (2.2: impl_abstract): also the Meta kernel
                    fake(op, fake_fn, lib=lib)
                else:
                    lib.impl(name, fake_fn, "Meta")
                    try:  # torch 1.13 routes meta tensors through AutogradMeta first
                        lib.impl(name, fake_fn, "AutogradMeta")
                    except RuntimeError:  # pragma: no cover - a torch that has one already
                        pass
            how = ("torch.library.Library + %s" % fake.__name__ if fake is not None
                   else "torch.library.Library + Meta kernel")
            _LIB = lib
            REGISTERED = True
            HOW = "%s (torch %s)" % (how, torch.__version__)
            return
        if lib_mod is not None and hasattr(lib_mod, "custom_op"):  # pragma: no cover
            from typing import Optional as Opt, Tuple as Tup

            def verify_step(q: torch.Tensor, kv_cache: torch.Tensor, page_table: torch.Tensor,
                            tree_mask: Opt[torch.Tensor], plan_id: int,
                            d_latent: int, kv_scale: Opt[float] = None,
                            kv_scale_tensor: Opt[torch.Tensor] = None,
                            page_table_rows: Opt[torch.Tensor] = None
                            ) -> Tup[torch.Tensor, torch.Tensor]:
                return _run(q, kv_cache, page_table, tree_mask, plan_id, d_latent, kv_scale,
                            kv_scale_tensor, page_table_rows)

            def verify_step_out(q: torch.Tensor, kv_cache: torch.Tensor,
                                page_table: torch.Tensor, tree_mask: Opt[torch.Tensor],
                                plan_id: int, out: torch.Tensor, lse: torch.Tensor,
                                kv_scale: Opt[float] = None,
                                kv_scale_tensor: Opt[torch.Tensor] = None,
                                page_table_rows: Opt[torch.Tensor] = None) -> None:
                _run_out(q, kv_cache, page_table, tree_mask, plan_id, out, lse, kv_scale,
                         kv_scale_tensor, page_table_rows)

            op = lib_mod.custom_op(OP, mutates_args=())(verify_step)
            op.register_fake(_fake)
            op_out = lib_mod.custom_op(OP_OUT, mutates_args=("out", "lse"))(verify_step_out)
            op_out.register_fake(_fake_out)
            REGISTERED, HOW = True, "torch.library.custom_op (torch %s)" % torch.__version__
            return
        HOW = "torch %s has no torch.library" % torch.__version__
    except Exception as e:  # pragma: no cover - a torch whose library API differs again
        HOW = "registration failed on torch %s: %s: %s" % (
            torch.__version__, type(e).__name__, e)


_register()
if REGISTERED:
    _OP = torch.ops.mlaverify.verify_step
    _OP_OUT = torch.ops.mlaverify.verify_step_out


def verify_step(plan: Any, q: Any, kv_cache: Any, page_table: Any, tree_mask: Any = None,
                kv_scale: Any = None, out: Any = None, lse: Any = None,
                page_table_rows: Any = None) -> Tuple[Any, Any]:
    """The op for `plan` (a StepPlan); returns (out, lse). kv_scale: an FP8 cache's scale, a
    float or a 1-element float32 tensor (None: not passed). out and lse (both or neither):
    given, torch.ops.mlaverify.verify_step_out writes them (nothing allocated: for a captured
    layer) and they are returned; else verify_step returns fresh ones. page_table_rows: see
    StepPlan.run."""
    op = _OP
    if op is None:
        raise RuntimeError("torch.ops.mlaverify.verify_step is not registered: " + HOW)
    kw = {}
    if kv_scale is not None:
        if isinstance(kv_scale, torch.Tensor):
            kw["kv_scale_tensor"] = kv_scale
        else:  # a number, never a bool or a string (kv_scale_arg's rule)
            kw["kv_scale"] = real_arg("kv_scale", kv_scale)
    if page_table_rows is not None:
        kw["page_table_rows"] = page_table_rows
    if out is None and lse is None:
        return op(q, kv_cache, page_table, tree_mask, plan.id, plan.d_latent, **kw)
    if out is None or lse is None:
        raise invalid("verify_step writes into out and lse given together (or returns fresh "
                      "ones when neither is given)")
    _OP_OUT(q, kv_cache, page_table, tree_mask, plan.id, out, lse, **kw)
    return out, lse
