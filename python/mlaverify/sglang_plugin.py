"""mlaverify as an SGLang attention backend named ``mlaverify``, registered by SGLang's plugin
loader: the wheel (python/build_wheel.py) declares ``register`` in the entry-point group
``sglang.srt.plugins``, which SGLang runs in every process before it parses its flags.

    --prefill-attention-backend fa3 --decode-attention-backend mlaverify
    --speculative-attention-mode decode [--speculative-draft-attention-backend fa3]

(python/README.md has the whole recipe.) ``factory(model_runner)`` derives every argument of
MlaVerifyAttnBackend from SGLang's ModelRunner: heads per attention-TP rank, the softmax scale
(YaRN's mscale included), draft tokens, req_to_token and the request pool's size, the pools,
KV dtype, and the mask mode of the speculative algorithm.
"""
import math

NAME = "mlaverify"

# what spec_info.custom_mask holds, per speculative algorithm: EAGLE's trees are FULL_MASK (the
# server's default tree_mask_mode); DFlash verifies a causal block (its mask, when SGLang builds
# one, is all-True at capture and None at replay: causal words are what is right)
_MASK_MODE = {"EAGLE": "full", "EAGLE3": "full", "NEXTN": "full", "STANDALONE": "full",
              "NGRAM": "full", "DFLASH": "causal", "DSPARK": "causal", None: "causal",
              "NONE": "causal"}


def _algorithm(model_runner):
    """The speculative algorithm's name ("EAGLE", "DFLASH", ...) or None."""
    algo = getattr(model_runner.server_args, "speculative_algorithm", None)
    if algo is None:
        return None
    name = getattr(algo, "name", algo)
    return str(name).upper()


def _attn_tp_size(model_runner):
    try:
        from sglang.srt.runtime_context import get_parallel
        p = get_parallel()
        return int(p.attn_tp_size), int(getattr(p, "attn_dcp_size", 1) or 1)
    except Exception:  # SGLang without runtime_context: the runner's own fields
        tp = getattr(model_runner, "attn_tp_size", None) or getattr(model_runner, "tp_size", 1)
        return int(tp), 1


def softmax_scale(model_config):
    """The MLA softmax scale of an SGLang ModelConfig: its `scaling` when it has one, else
    1 / sqrt(qk_nope_head_dim + qk_rope_head_dim) times YaRN's mscale squared (DeepSeek's
    rule; every layer's `scaling` is compared with it at its first forward)."""
    s = getattr(model_config, "scaling", None)
    if isinstance(s, (int, float)):
        return float(s)
    hf = getattr(model_config, "hf_text_config", None) or model_config.hf_config
    d = int(hf.qk_nope_head_dim) + int(hf.qk_rope_head_dim)
    scale = d ** -0.5
    rs = getattr(hf, "rope_scaling", None)
    if rs and rs.get("apply_yarn_scaling", True):
        try:
            from sglang.srt.configs.model_config import compute_mla_mscale_scaling
            return float(compute_mla_mscale_scaling(dict(rs), scale))
        except Exception:  # the same rule, where that SGLang function does not import
            factor = float(rs.get("factor", 1.0))
            mscale_all_dim = float(rs.get("mscale_all_dim", 0.0) or 0.0)
            if factor > 1.0:
                m = 0.1 * mscale_all_dim * math.log(factor) + 1.0
                scale *= m * m
    return scale


def kv_dtype_of(model_runner):
    """None (the pool holds the model dtype) or "fp8_e4m3"; other pools are refused."""
    dt = str(getattr(model_runner, "kv_cache_dtype", "")).replace("torch.", "")
    model_dt = str(getattr(model_runner, "dtype", "")).replace("torch.", "")
    from .api import is_fp8  # the one table of FP8 names
    if is_fp8(dt):
        return "fp8_e4m3"
    if dt in ("", "auto", model_dt):
        return None
    from .errors import invalid
    raise invalid("mlaverify reads a KV pool of the model dtype or FP8 E4M3, not %s "
                  "(--kv-cache-dtype)" % dt)


def _verify_backend_max_context_len(self):
    """HybridAttnBackend.max_context_len: the backend that serves target verify's."""
    side = self.decode_backend if self.spec_attn_is_decode else self.prefill_backend
    n = getattr(side, "max_context_len", None)
    return n if n is not None else self.model_runner.model_config.context_len


def _complete_hybrid():
    """SGLang's EAGLE draft reads model_runner.attn_backend.max_context_len (to size the tree
    mask when a batch's seq_lens_sum is unknown), which HybridAttnBackend, the backend a
    decode-only mlaverify sits in, does not have: give it the verify backend's (only where it
    is missing; SGLang's module is already imported when its builder calls the factory)."""
    import sys
    mod = sys.modules.get("sglang.srt.layers.attention.hybrid_attn_backend")
    cls = getattr(mod, "HybridAttnBackend", None)
    if cls is not None and not hasattr(cls, "max_context_len"):
        cls.max_context_len = property(_verify_backend_max_context_len)


def factory(model_runner):
    """MlaVerifyAttnBackend for an SGLang ModelRunner (the registered backend's factory)."""
    from .errors import invalid
    from .sglang_backend import MlaVerifyAttnBackend
    import torch
    if not getattr(model_runner, "use_mla_backend", True):
        raise invalid("mlaverify runs MLA models (DeepSeek-V3, Kimi K2) only")
    page_size = getattr(model_runner, "page_size", None)
    if page_size is None:
        page_size = getattr(model_runner.server_args, "page_size", 1)
    if int(page_size or 1) != 1:
        raise invalid("mlaverify reads SGLang's token pool with --page-size 1, not %s"
                      % page_size)
    mc = model_runner.model_config
    tp, dcp = _attn_tp_size(model_runner)
    if dcp > 1:
        raise invalid("mlaverify does not run decode context parallel (attn_dcp_size %d)" % dcp)
    heads = int(mc.num_attention_heads)
    if heads % tp:
        raise invalid("%d heads do not split over %d attention-TP ranks" % (heads, tp))
    algo = _algorithm(model_runner)
    if algo not in _MASK_MODE:
        raise invalid("mlaverify knows no mask mode for speculative algorithm %s" % algo)
    sa = model_runner.server_args
    n = int(sa.speculative_num_draft_tokens or 1) if algo not in (None, "NONE") else 1
    dtype = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}.get(
        str(getattr(model_runner, "dtype", "torch.bfloat16")).replace("torch.", ""), "bf16")
    dev = getattr(model_runner, "device", "cuda")
    if str(dev) == "cuda" and getattr(model_runner, "gpu_id", None) is not None:
        dev = torch.device("cuda", int(model_runner.gpu_id))
    pool = model_runner.req_to_token_pool
    hf = getattr(mc, "hf_text_config", None) or getattr(mc, "hf_config", None)
    d_latent = int(getattr(mc, "kv_lora_rank", None) or hf.kv_lora_rank)
    d_rope = int(getattr(mc, "qk_rope_head_dim", None) or hf.qk_rope_head_dim)
    _complete_hybrid()
    return MlaVerifyAttnBackend(
        heads // tp, softmax_scale(mc), n, pool.req_to_token, max_batch=int(pool.size),
        d_latent=d_latent, d_rope=d_rope, dtype=dtype, device=dev, mask_mode=_MASK_MODE[algo],
        kv_dtype=kv_dtype_of(model_runner), token_to_kv_pool=model_runner.token_to_kv_pool,
        req_to_token_pool=pool, max_context_len=getattr(mc, "context_len", None))


def register():
    """The entry point: register the backend name with SGLang's attention registry and its
    flag choices (idempotent)."""
    from sglang.srt.layers.attention.attention_registry import (ATTENTION_BACKENDS,
                                                                 register_attention_backend)
    if ATTENTION_BACKENDS.get(NAME) is not factory:
        register_attention_backend(NAME)(factory)
    from sglang.srt import server_args
    if NAME not in server_args.ATTENTION_BACKEND_CHOICES:
        server_args.add_attention_backend_choices([NAME])
