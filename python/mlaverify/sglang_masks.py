"""The tree-mask buffer of the SGLang backend: one fixed [max_tokens, words] int32 buffer that
every layer's run (and a captured graph) reads, written once per step from SGLang's
spec_info.custom_mask, or with causal words when the step has none.

What a captured graph reads must not depend on what was present at capture: SGLang captures
DFlash graphs with an all-True mask and replays them with custom_mask None. So the buffer is
always handed to the library in verify, and a step without a mask writes the causal words
(node i of a request sees nodes 0..i), the same visibility as no mask at all.

Modes (SGLang's TreeMaskMode and more): "full" (FULL_MASK: per request [n, prefix + n] row-major,
bool or uint8, nonzero visible; the prefix columns are the library's always-visible prefix and
only the draft columns are read), "qlen" (QLEN_ONLY: per request [n, n]), "bitpacking"
(QLEN_ONLY_BITPACKING: [T] integers, bit k = node k), "packed" (the library's [T, words]
words), "causal" (the mask ignored), "auto" (from the mask's dtype and shape; a flat bool mask
is refused: FULL_MASK or QLEN_ONLY cannot be told apart on a padded batch). Device ops only.
"""
from ._arrays import torch_module
from .errors import invalid
from .sglang import BITPACKED_DTYPES, bitpacked_to_words, pack_visible_torch


class TreeMaskBuffer:
    """buf [max_tokens, words] int32 for requests of n nodes each, on `device`."""

    def __init__(self, max_tokens, n, words, device):
        torch = torch_module()
        i32 = torch.int32
        self.n, self.words = n, words
        self.buf = torch.zeros((max_tokens, words), dtype=i32, device=device)
        self._dev = self.buf.device
        self._node = torch.arange(n, dtype=torch.int64, device=device)
        self._shifts = torch.arange(32, dtype=torch.int64, device=device)
        # int32 weights of nodes 0..n-1 for a one-word mask (node 31 is the sign bit)
        self._bits = torch.tensor([(1 << k) if k < 31 else -2**31 for k in range(min(n, 32))],
                                  dtype=i32, device=device)
        # the causal words of every row, and how many leading rows of buf hold them now (this
        # class is the buffer's only writer)
        local = torch.arange(max_tokens, dtype=torch.int64, device=device) % n
        self._causal = pack_visible_torch(self._node[None, :] <= local[:, None], words,
                                          self._shifts)
        self._causal_rows = 0

    def write(self, mode, bs, seq, mask):
        """Write the rows of bs requests (prefix lengths seq [>= bs], a device tensor) from
        `mask` read in `mode`, or causal words for mask None or mode "causal"."""
        n, T, words = self.n, bs * self.n, self.words
        if mask is None or mode == "causal":
            if self._causal_rows < T:
                self.buf.copy_(self._causal)
                self._causal_rows = self.buf.shape[0]
            return
        torch = torch_module()
        dt = str(mask.dtype).replace("torch.", "")
        if mode == "auto":
            if dt == "bool":
                # A flat bool mask is FULL_MASK or QLEN_ONLY, a server-wide choice in SGLang,
                # and its size cannot tell them apart without the prefix lengths, which live on
                # the device (a padded batch's FULL_MASK of short prefixes has the size of a
                # QLEN_ONLY one): guessing would be a silent wrong answer, so it is refused.
                if mask.dim() != 2:
                    raise invalid("a flat bool custom_mask may be FULL_MASK or QLEN_ONLY: pass "
                                  "mask_mode='full' or 'qlen' (SGLang's tree_mask_mode)")
                mode = "qlen"
            elif mask.dim() == 2:
                mode = "packed"
            else:
                mode = "bitpacking"
        self._causal_rows = 0
        # the mask may cover the real requests only (a padded graph batch): the rows it has
        rows = min(int(mask.shape[0]), T) if mode in ("packed", "bitpacking") else T
        if mode == "packed":
            if mask.dim() != 2 or mask.shape[1] != words or dt not in ("int32", "uint32"):
                raise invalid("a packed custom_mask must be int32 [<= %d, %d], not %s %s"
                              % (T, words, dt, list(mask.shape)))
            self.buf[:rows].copy_(mask[:rows].view(torch.int32))
            return
        if mode == "bitpacking":
            if mask.dim() != 1 or dt not in BITPACKED_DTYPES:
                raise invalid("a QLEN_ONLY_BITPACKING custom_mask must be [<= %d] of %s, not "
                              "%s %s" % (T, "/".join(BITPACKED_DTYPES), dt, list(mask.shape)))
            if words != 1:
                raise invalid("a bit-packed mask holds 32 nodes at most; num_draft_tokens = %d"
                              % n)
            self.buf[:rows].copy_(bitpacked_to_words(mask[:rows]))
            return
        if dt not in ("bool", "uint8"):
            raise invalid("a %s custom_mask must be bool or uint8 (nonzero: visible), not %s"
                          % ({"full": "FULL_MASK", "qlen": "QLEN_ONLY"}[mode], dt))
        flat = mask.reshape(-1)
        if mode == "qlen":
            rows = min(flat.numel() // n, T)
            if rows == 0:
                raise invalid("a QLEN_ONLY custom_mask needs n * n = %d entries per request, "
                              "not %d in all" % (n * n, flat.numel()))
            vis = flat[:rows * n].view(rows, n)
        else:  # full: request b's rows [n, seq_b + n], the draft columns after the prefix
            if flat.numel() == 0:
                raise invalid("the FULL_MASK custom_mask is empty")
            s = seq[:bs].to(torch.int64)
            kv = s + n                                                          # [bs]
            start = torch.cumsum(kv * n, 0) - kv * n                            # [bs]
            i = self._node
            idx = (start + s)[:, None, None] + \
                i[None, :, None] * kv[:, None, None] + i[None, None, :]         # [bs, n, n]
            vis = flat[idx.clamp_(0, flat.numel() - 1)].view(T, n)
        if vis.dtype is not torch.bool:
            vis = vis != 0
        if words == 1 and vis.device == self._dev:
            # bit k = node k, summed in int32 (distinct bits: exact, no overflow)
            torch.sum(vis * self._bits, -1, dtype=torch.int32, out=self.buf[:rows, 0])
        else:
            self.buf[:rows].copy_(pack_visible_torch(vis, words, self._shifts))
