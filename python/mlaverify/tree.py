"""Host helpers: tree masks and greedy acceptance (numpy in, numpy out); merging attention
states is mlaverify.merge's.

The packed mask layout is the library's: row t has ``words = ceil(max_q_len / 32)`` uint32
words; bit k (word k // 32, bit k % 32) says draft node k of t's request is visible to t.
torch takes it as int32: ``torch.from_numpy(mask.view(np.int32)).cuda()``.
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

import numpy as np

from . import _lib
from ._arrays import c_int, host_int32, is_torch
from .api import tree_mask_words
from .errors import check, invalid


def _ptr(a):
    return a.ctypes.data if a.size else None


def tree_mask_from_parents(parents: Any, q_indptr: Any = None,
                           words: Optional[int] = None) -> np.ndarray:
    """Packed tree mask: each node sees itself and its ancestors (mlav_tree_mask_from_parents).

    parents    one request's [q_len] local parents (parents[0] = -1, parents[i] < i), or, with
               q_indptr, every request's concatenated [T] (as a bundle's tree_parents)
    q_indptr   [B+1] or None
    words      words per row; default ceil(q_len / 32) (batch: of the longest request)
    Returns a uint32 array [q_len or T, words].
    """
    lib = _lib.load()
    par = host_int32("parents", parents)
    if par.ndim != 1:
        raise invalid("parents must be 1-D, not %s" % list(par.shape))
    if q_indptr is None:
        indptr = np.array([0, par.shape[0]], dtype=np.int32)
    else:
        indptr = host_int32("q_indptr", q_indptr)
        if indptr.ndim != 1 or indptr.shape[0] < 1 or indptr[0] != 0 or \
                indptr[-1] != par.shape[0] or np.any(np.diff(indptr) < 0):
            raise invalid("q_indptr must start at 0, not decrease, and end at len(parents) = %d"
                          % par.shape[0])
    q_lens = np.diff(indptr)
    need = tree_mask_words(int(q_lens.max()) if q_lens.size else 0)
    words = need if words is None else c_int("words", words)
    if words < need:
        raise invalid("words = %d is fewer than the %d the longest request needs" % (words, need))
    mask = np.zeros((par.shape[0], words), dtype=np.uint32)
    for b in range(q_lens.shape[0]):
        lo, n = int(indptr[b]), int(q_lens[b])
        if n == 0:
            continue
        sub = np.ascontiguousarray(par[lo:lo + n])
        rows = np.zeros((n, words), dtype=np.uint32)
        check(lib.mlav_tree_mask_from_parents(n, sub.ctypes.data, words, rows.ctypes.data))
        mask[lo:lo + n] = rows
    return mask


def pack_mask(visible: Any, words: Optional[int] = None) -> np.ndarray:
    """Pack a bool mask [rows, n] (visible[t, k]: node k visible to row t) into uint32 words
    [rows, words] (default ceil(n / 32), at least 1)."""
    v = np.asarray(visible.cpu() if is_torch(visible) else visible).astype(bool)
    if v.ndim != 2:
        raise invalid("the mask must be 2-D [rows, nodes], not %s" % list(v.shape))
    rows, n = v.shape
    need = max(1, -(-n // 32))
    words = need if words is None else c_int("words", words)
    if words < need:
        raise invalid("words = %d cannot hold %d nodes" % (words, n))
    padded = np.zeros((rows, words * 32), dtype=bool)
    padded[:, :n] = v
    bits = np.packbits(padded.reshape(rows, words, 4, 8), axis=-1, bitorder="little")
    return np.ascontiguousarray(bits.reshape(rows, words, 4)).view("<u4").reshape(rows, words)


def unpack_mask(mask: Any, n: int) -> np.ndarray:
    """The bool mask [rows, n] of a packed uint32 (or int32) mask [rows, words]."""
    m = np.ascontiguousarray(np.asarray(mask.cpu() if is_torch(mask) else mask)).view("<u4")
    rows, words = m.shape
    bits = np.unpackbits(m.view(np.uint8).reshape(rows, words * 4), axis=-1, bitorder="little")
    return bits[:, :n].astype(bool)


def parents_from_tree_mask(mask: Any, q_indptr: Any) -> np.ndarray:
    """Inverse of tree_mask_from_parents for a tree mask (each row: itself and its
    ancestors, ancestors at lower indices): parents [T], -1 for each root. Raises
    InvalidArgumentError when the mask is not such a tree."""
    indptr = host_int32("q_indptr", q_indptr)
    q_lens = np.diff(indptr)
    vis = unpack_mask(mask, int(q_lens.max()) if q_lens.size else 0)
    parents = np.full(int(indptr[-1]), -1, dtype=np.int32)
    for b, n in enumerate(q_lens):
        lo = int(indptr[b])
        for i in range(1, int(n)):
            seen = np.nonzero(vis[lo + i, :i])[0]
            if seen.size:
                parents[lo + i] = seen[-1]
            else:
                raise invalid("request %d: node %d sees no earlier node, so the mask is not a "
                              "draft tree rooted at node 0" % (b, i))
    rebuilt = tree_mask_from_parents(parents, indptr, words=np.asarray(mask).shape[1])
    if not np.array_equal(rebuilt.view("<u4"), np.ascontiguousarray(
            np.asarray(mask.cpu() if is_torch(mask) else mask)).view("<u4")):
        raise invalid("the mask is not a tree mask (some row is not exactly its node and the "
                      "node's ancestors)")
    return parents


def accept_greedy(parents: Any, draft_tokens: Any,
                  target_tokens: Any) -> Tuple[np.ndarray, int]:
    """Greedy acceptance of one request's draft tree (mlav_tree_accept_greedy).

    parents, draft_tokens, target_tokens: [q_len] ints (target_tokens[p]: the target model's
    token after node p). Returns (path, bonus_token): path is the int32 array of accepted node
    indices from node 0; bonus_token = target_tokens[path[-1]].
    """
    lib = _lib.load()
    par = host_int32("parents", parents)
    if par.ndim != 1:
        raise invalid("parents must be 1-D [q_len], not %s" % list(par.shape))
    n = par.shape[0]
    draft = host_int32("draft_tokens", draft_tokens, shape=(n,))
    target = host_int32("target_tokens", target_tokens, shape=(n,))
    accepted = np.full(max(n, 1), -1, dtype=np.int32)
    num, bonus = ctypes.c_int32(0), ctypes.c_int32(0)
    check(lib.mlav_tree_accept_greedy(n, _ptr(par), _ptr(draft), _ptr(target),
                                      accepted.ctypes.data, ctypes.byref(num),
                                      ctypes.byref(bonus)))
    return accepted[:num.value].copy(), int(bonus.value)
