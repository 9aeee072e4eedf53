"""Context-parallel verify end to end across processes: R ranks, one process each
(torch.multiprocessing), hold their KV shards of one random batch (trees and chains, ragged
q_len, a rank holding nothing of a request included), run their sharded Plan, and exchange and
merge the partial states with mv.cp_merge_states over torch.distributed; every rank's merged state
is held to the fp64 oracle of the whole cache. On the CPU backend over gloo wherever torch is (the
ranks simulated on one machine, as CI runs it); on CUDA over NCCL, one GPU per rank, when
MLAV_CP_GPUS=R names R >= 2 visible GPUs (the multi-GPU test; skipped otherwise). Fresh seeds,
printed (MLAV_TEST_SEED reproduces a failure)."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import mlaverify as mv  # noqa: E402
from mlav_testutil import compare, make_case, oracle, round_to_dtype  # noqa: E402
from test_shard import rank_copy  # noqa: E402

# the CUDA backend's flash kernels take DeepSeek's dims; the CPU runs small ones
DIMS = {"cpu": dict(H=2, Dl=32, Dr=8, dtype="f32"), "cuda": dict(H=16, Dl=512, Dr=64, dtype="f16")}


def _case(seed, mode):
    rng = np.random.default_rng(seed)
    d = DIMS[mode]
    reqs = [(int(rng.integers(1, 7)), int(rng.integers(0, 300)),
             ["chain", "bushy", "random"][int(rng.integers(0, 3))]) for _ in range(3)]
    reqs.append((2, 1, "chain"))  # 3 rows: with more ranks than rows some rank holds none
    return make_case(rng, H=d["H"], Dl=d["Dl"], Dr=d["Dr"], dtype=d["dtype"],
                     page_size=int(rng.choice([1, 4, 16])), reqs=reqs)


def _stripe(case, ranks, kind):
    return {"token": 1, "page": case["page_size"],
            "chunk": -(-int(case["kv_lens"].max()) // ranks)}[kind]


def _rank(rank, ranks, init, seed, kind, mode, out_dir):
    if mode == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if mode == "cuda" else "gloo", init_method=init, rank=rank,
                            world_size=ranks)
    try:
        case = _case(seed, mode)
        stripe = _stripe(case, ranks, kind)
        local, local_pt, _ = rank_copy(case, ranks, rank, stripe,
                                       np.random.default_rng(seed + 1 + rank))
        dev = "cuda:%d" % rank if mode == "cuda" else "cpu"

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(dev)
        mask = case["tree_mask"]
        with mv.Plan(num_heads=case["H"], d_latent=case["Dl"], d_rope=case["Dr"],
                     softmax_scale=case["scale"], dtype=case["dtype"],
                     page_size=case["page_size"], q_indptr=case["q_indptr"],
                     kv_lens=case["kv_lens"], max_pages=local_pt.shape[1],
                     shard=(ranks, rank, stripe), backend=mode,
                     device=rank if mode == "cuda" else None) as plan:
            out, lse = plan.run(t(case["q"]), t(local), t(local_pt),
                                None if mask is None else t(mask.view(np.int32)))
            m_out, m_lse = mv.cp_merge_states(out, lse)
            if mode == "cuda":
                torch.cuda.synchronize()
        np.save(os.path.join(out_dir, "out%d.npy" % rank), m_out.cpu().numpy())
        np.save(os.path.join(out_dir, "lse%d.npy" % rank), m_lse.cpu().numpy())
    finally:
        dist.destroy_process_group()


def _run(tmp_path, seed, ranks, kind, mode):
    init = "file://" + str(tmp_path / "init")
    torch.multiprocessing.spawn(_rank, args=(ranks, init, seed, kind, mode, str(tmp_path)),
                                nprocs=ranks, join=True)
    case = _case(seed, mode)
    o64, l64 = oracle(case)
    what = "%d ranks (%s), stripe %d (%s), page %d" % (
        ranks, mode, _stripe(case, ranks, kind), kind, case["page_size"])
    for r in range(ranks):
        out = np.load(tmp_path / ("out%d.npy" % r))
        lse = np.load(tmp_path / ("lse%d.npy" % r))
        compare(case, out, lse, round_to_dtype(o64, case["dtype"]), l64,
                what + ", rank %d's merge" % r, seed)


@pytest.mark.parametrize("ranks,kind", [(2, "token"), (3, "page"), (4, "chunk")])
def test_cp_verify_cpu_ranks_over_gloo(tmp_path, seed, ranks, kind):
    _run(tmp_path, seed, ranks, kind, "cpu")


def _gpus():
    want = int(os.environ.get("MLAV_CP_GPUS", "0") or 0)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return want if 2 <= want <= have else 0


@pytest.mark.skipif(not _gpus(), reason="MLAV_CP_GPUS=R with R >= 2 visible GPUs not set")
@pytest.mark.parametrize("kind", ["token", "page", "chunk"])
def test_cp_verify_cuda_ranks_over_nccl(tmp_path, seed, kind):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast (the device rules)
    _run(tmp_path, seed, _gpus(), kind, "cuda")
