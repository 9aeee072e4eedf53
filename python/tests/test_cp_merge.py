"""cp_merge_states: the context-parallel exchange over torch.distributed, with R ranks simulated
by R processes on one machine (gloo, CPU tensors): rank r holds state r of R random states
(empty rows included); every rank's merged state equals merge_states of the R states stacked,
bit for bit (the same host merge after the all-gather). Needs torch with torch.distributed;
skipped otherwise. The NCCL path (CUDA tensors) is the same call; tests/test_cp_nccl_gpu.c holds
the C library's own NCCL exchange."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import mlaverify as mv  # noqa: E402

ROWS, DIM = 37, 64


def _states(seed, ranks, dtype):
    g = torch.Generator().manual_seed(seed)
    outs = (torch.rand(ranks, ROWS, DIM, generator=g) * 2 - 1).to(dtype)
    lses = torch.rand(ranks, ROWS, generator=g) * 8 - 4
    empty = torch.rand(ranks, ROWS, generator=g) < 0.2
    lses[empty] = float("-inf")
    lses[:, 0] = float("-inf")  # a row no rank sees
    return outs, lses


def _rank(rank, ranks, init, seed, dtype_name, result_dir):
    dtype = getattr(torch, dtype_name)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=ranks)
    try:
        outs, lses = _states(seed, ranks, dtype)
        out, lse = outs[rank].clone(), lses[rank].clone()
        m_out, m_lse = mv.cp_merge_states(out, lse)
        # scratch given, merged into the local state itself
        g = (torch.empty_like(outs), torch.empty_like(lses))
        a_out, a_lse = mv.cp_merge_states(out, lse, gathered=g, merged_out=out, merged_lse=lse)
        torch.save({"out": m_out, "lse": m_lse, "a_out": a_out, "a_lse": a_lse},
                   os.path.join(result_dir, "rank%d.pt" % rank))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("ranks,dtype_name", [(2, "float32"), (3, "bfloat16")])
def test_cp_merge_states_gloo(tmp_path, ranks, dtype_name):
    seed = int.from_bytes(os.urandom(4), "little")
    print("seed", seed)
    init = "file://" + str(tmp_path / "init")
    torch.multiprocessing.spawn(_rank, args=(ranks, init, seed, dtype_name, str(tmp_path)),
                                nprocs=ranks, join=True)
    outs, lses = _states(seed, ranks, getattr(torch, dtype_name))
    want_out, want_lse = mv.merge_states(outs, lses)
    for r in range(ranks):
        got = torch.load(os.path.join(tmp_path, "rank%d.pt" % r))
        for o, s in ((got["out"], got["lse"]), (got["a_out"], got["a_lse"])):
            assert torch.equal(o.view(torch.int16 if o.dtype == torch.bfloat16 else torch.int32),
                               want_out.view(torch.int16 if o.dtype == torch.bfloat16
                                             else torch.int32))
            assert torch.equal(s.view(torch.int32), want_lse.view(torch.int32))
    assert torch.all(want_lse[0] == float("-inf")) and torch.all(want_out[0] == 0)


def test_cp_merge_states_refusals():
    with pytest.raises(mv.InvalidArgumentError):
        mv.cp_merge_states(np.zeros((2, 4), np.float32), np.zeros(2, np.float32))
    if not dist.is_initialized():
        with pytest.raises(mv.InvalidArgumentError):
            mv.cp_merge_states(torch.zeros(2, 4), torch.zeros(2))


def test_nccl_compiled_is_an_int():
    from mlaverify import _lib
    assert _lib.load().mlav_nccl_compiled() in (0, 1)


def _refuse_gathered(rank, init, result_dir):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=1)
    try:
        out, lse = torch.zeros(4, 8), torch.zeros(4)
        cases = {"shape": (torch.zeros(2, 4, 8), torch.zeros(2, 4)),
                 "dtype": (torch.zeros(1, 4, 8, dtype=torch.float16), torch.zeros(1, 4)),
                 "contiguous": (torch.zeros(1, 8, 4).transpose(1, 2), torch.zeros(1, 4))}
        said = {}
        for name, g in cases.items():
            try:
                mv.cp_merge_states(out, lse, gathered=g)
                said[name] = "accepted"
            except mv.InvalidArgumentError as e:
                said[name] = str(e)
        torch.save(said, os.path.join(result_dir, "said.pt"))
    finally:
        dist.destroy_process_group()


def test_cp_merge_states_refuses_bad_scratch(tmp_path):
    init = "file://" + str(tmp_path / "init")
    torch.multiprocessing.spawn(_refuse_gathered, args=(init, str(tmp_path)), nprocs=1, join=True)
    said = torch.load(os.path.join(tmp_path, "said.pt"))
    assert "stack of 1 states" in said["shape"]
    assert "stack of 1 states" in said["dtype"]
    assert "contiguous" in said["contiguous"]
