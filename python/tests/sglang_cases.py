"""Steps of an SGLang-shaped engine for the backend tests, and what each must give.

A World is the state SGLang keeps: req_to_token (request rows of slot ids), one MLA pool per
layer ([rows, 1, W]); a Step is one batch: requests (their req_to_token rows), prefixes
(SGLang's seq_lens), draft trees, and the masks SGLang would hand over for them. expected()
is the reference backend (fp64) on the step's exact problem; CpuGraph stands for a CUDA graph
on the CPU: the mlav_run calls of a capture replayed with the pointers they had then.
"""
import contextlib
import ctypes

import numpy as np

import mlaverify as mv
from mlav_testutil import make_parents


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


class World:
    def __init__(self, rng, torch, *, H, DL, DR, n, reqs, ctx_len, pool_rows, layers,
                 dtype=None, device="cpu", scale=0.125):
        self.rng, self.torch = rng, torch
        self.H, self.DL, self.DR, self.n = H, DL, DR, n
        self.W = DL + DR
        self.reqs, self.ctx_len, self.layers = reqs, ctx_len, layers
        # slot 0 stays free: SGLang's padded graph tokens write there
        perm = 1 + rng.permutation(pool_rows - 1)[:reqs * ctx_len].reshape(reqs, ctx_len)
        self.r2t_np = perm.astype(np.int32)
        self.req_to_token = torch.from_numpy(self.r2t_np).to(device)
        self.dtype = dtype or torch.float32
        self.pool_np = [rng.uniform(-1, 1, (pool_rows, 1, self.W)).astype(np.float32)
                        for _ in range(layers)]
        self.device = device
        self.scale = scale

    def step(self, real, *, kinds="random", bs=None, max_prefix=None, decode=False):
        """One batch of `real` requests padded to bs (SGLang's graph padding: request row 0,
        seq_lens 1)."""
        torch, rng, n = self.torch, self.rng, (1 if decode else self.n)
        bs = real if bs is None else bs
        rpi = rng.choice(np.arange(1, self.reqs), real, replace=False)
        top = self.ctx_len - n if max_prefix is None else max_prefix
        seq = rng.integers(1 if decode else 0, top + 1, real)
        parents = [make_parents(rng, n, kinds) for _ in range(real)]
        s = Step(self, rpi, seq, parents, bs, decode)
        return s


class Step:
    def __init__(self, world, rpi, seq, parents, bs, decode):
        torch = world.torch
        self.w, self.rpi, self.seq, self.parents = world, rpi, seq, parents
        self.real, self.bs, self.decode = len(rpi), bs, decode
        n = 1 if decode else world.n
        self.n = n
        dev = world.device
        r = np.zeros(bs, np.int64)
        r[:self.real] = rpi
        sl = np.ones(bs, np.int64)
        sl[:self.real] = seq
        self.req_pool_indices = torch.from_numpy(r).to(dev)
        self.seq_lens = torch.from_numpy(sl).to(dev)
        # the slots of this step's tokens: draft rows after the prefix (decode: the new token,
        # already counted in seq_lens)
        if decode:
            loc = [world.r2t_np[q, s - 1] for q, s in zip(rpi, seq)]
        else:
            loc = np.concatenate([world.r2t_np[q, s:s + n] for q, s in zip(rpi, seq)])
        self.out_cache_loc = torch.from_numpy(np.asarray(loc, np.int64)).to(dev)
        self.T = bs * n

    # SGLang's masks for the real requests (FULL_MASK / QLEN_ONLY: flat, request after request)
    def visible(self):
        return [mv.unpack_mask(mv.tree_mask_from_parents(p), self.n) for p in self.parents]

    def mask(self, mode, dtype=None):
        torch, n = self.w.torch, self.n
        vis = self.visible()
        if mode == "full":
            rows = [np.concatenate([np.ones((n, s), bool), v], 1).reshape(-1)
                    for s, v in zip(self.seq, vis)]
            m = torch.from_numpy(np.concatenate(rows))
        elif mode == "qlen":
            m = torch.from_numpy(np.concatenate([v.reshape(-1) for v in vis]))
        elif mode == "bitpacking":
            bits = np.concatenate([(v * (1 << np.arange(n))).sum(1) for v in vis])
            m = torch.from_numpy(bits.astype(np.uint8 if n <= 8 else np.int32))
        elif mode == "packed":
            qi = np.arange(self.real + 1, dtype=np.int32) * n
            m = torch.from_numpy(mv.tree_mask_from_parents(np.concatenate(self.parents), qi)
                                 .view(np.int32))
        else:
            return None
        if dtype is not None:
            m = m.to(dtype)
        return m.to(self.w.device)

    def q(self, dtype=None):
        """Fresh q [T, H * W] (the padded rows too)."""
        torch, w = self.w.torch, self.w
        x = torch.from_numpy(w.rng.uniform(-2, 2, (self.T, w.H * w.W)).astype(np.float32))
        return x.to(dtype or w.dtype).to(w.device)

    def k(self, dtype=None):
        """Fresh k rows [real * n, 1, W] for the step's tokens."""
        torch, w = self.w.torch, self.w
        x = torch.from_numpy(w.rng.uniform(-1, 1, (self.real * self.n, 1, w.W))
                             .astype(np.float32))
        return x.to(dtype or w.dtype).to(w.device)

    def expected(self, q, pool, *, causal=False, kv_dtype=None, kv_scale=None):
        """The reference backend's out [real * n, H, Dl] on the real requests' exact problem:
        q and pool as float32 values (pool: [rows, 1, W] numpy, or uint8 e4m3 bytes with
        kv_dtype "fp8_e4m3" and kv_scale)."""
        w, n = self.w, self.n
        T = self.real * n
        qn = q.float().cpu().numpy()[:T].reshape(T, w.H, w.W)
        qi = np.arange(self.real + 1, dtype=np.int32) * n
        kv = (self.seq + (0 if self.decode else n)).astype(np.int32)
        pt = np.ascontiguousarray(w.r2t_np[self.rpi])
        tm = None if (causal or self.decode) else \
            mv.tree_mask_from_parents(np.concatenate(self.parents), qi)
        kw = {} if kv_dtype is None else {"kv_dtype": kv_dtype, "kv_scale": kv_scale}
        out, _ = mv.verify(qn, pool, pt, tm, q_indptr=qi, kv_lens=kv, softmax_scale=w.scale,
                           d_latent=w.DL, dtype="f32", backend="reference", **kw)
        return np.asarray(out)

    def check(self, got, q, pool, what, seed, tol=1e-5, **kw):
        w = self.w
        T = self.real * self.n
        want = self.expected(q, pool, **kw)
        g = got.float().cpu().numpy()[:T].reshape(T, w.H, w.DL)
        err = rel_l2(g, want)
        assert err <= tol, "%s: rel-L2 %.3g > %g against the reference (seed %d)" % (
            what, err, tol, seed)


class CpuGraph:
    """A CUDA graph's view of the backend's layers, on the CPU: capture records each mlav_run's
    mlav_tensors as it is then (the pointers a graph bakes in); replay runs them again, after
    the step's out-of-graph metadata, as SGLang's graph runner does."""

    def __init__(self, backend):
        self.be = backend
        self.runs = []

    @contextlib.contextmanager
    def capture(self):
        plan = self.be.plan
        run = plan._run_ref

        def record(ref):
            t = ref._obj
            self.runs.append(type(t).from_buffer_copy(t))
            run(ref)
        plan._run_ref = record
        try:
            yield self
        finally:
            del plan._run_ref

    def replay(self):
        for t in self.runs:
            self.be.plan._run_ref(ctypes.byref(t))
