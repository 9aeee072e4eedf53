# early-pb.patch's arithmetic on the host: WG1's O_R and row sums over one row's pairs, in the
# base order (P_B at the pair's reference M) and in the patch's (P_B at ms, its own tiles'
# reference, then times exp2(ms - M) where M != ms), in float32, V as random vectors; rising and
# falling scores, masked tiles (-inf) and first pairs from -inf. Prints the worst relative
# difference of O_R / l.
#   /usr/bin/python3 bench/plans/s62/early_pb_model.py
import numpy as np
SLACK = 8.0  # reference_max.cuh's RESCALE_SLACK
moved = [0, 0]  # pairs where M != ms (the patch's factor taken), pairs in all
def next_ref(m, t): return max(m, t) if t > m + SLACK else m
def ref_factor(f, t): return 0.0 if f == -np.inf else np.float32(2.0) ** np.float32(f - t)
def run(seed, early):
    rng = np.random.default_rng(seed)
    m_run, l, o = -np.inf, np.float32(0), np.zeros(4, np.float32)
    for pair in range(12):
        sa = rng.normal(0, 3, 8).astype(np.float32) + np.float32(pair * rng.uniform(0, 6))
        sb = rng.normal(0, 3, 8).astype(np.float32) + np.float32(pair * rng.uniform(0, 6))
        if rng.random() < 0.2: sa[:] = -np.inf
        if rng.random() < 0.2: sb[:] = -np.inf
        va = rng.normal(size=(8, 4)).astype(np.float32)
        vb = rng.normal(size=(8, 4)).astype(np.float32)
        tma, tmb = sa.max(), sb.max()
        ref0 = next_ref(m_run, tma)
        M = next_ref(ref0, tmb)
        pa = np.exp2(sa - (0 if M == -np.inf else M)).astype(np.float32)  # WG0's P_A, at M
        if early:
            ms = next_ref(m_run, tmb)
            pb = np.exp2(sb - (0 if ms == -np.inf else ms)).astype(np.float32)
            moved[1] += 1
            if ms != M:
                moved[0] += 1
                pb = (pb * np.float32(ref_factor(ms, M))).astype(np.float32)
        else:
            pb = np.exp2(sb - (0 if M == -np.inf else M)).astype(np.float32)
        f1 = ref_factor(m_run, M)
        l = np.float32(l * f1); o = (o * np.float32(f1)).astype(np.float32)
        o = o + pb @ vb + pa @ va; l = l + pb.sum() + pa.sum()
        m_run = M
    return o / l if l > 0 else o
worst = 0
for seed in range(3000):
    a, b = run(seed, False), run(seed, True)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        assert np.array_equal(np.isnan(a), np.isnan(b)), seed
        continue
    worst = max(worst, float(np.max(np.abs(a - b)) / (np.max(np.abs(a)) + 1e-30)))
print(f"3000 rows, {moved[0]} of {moved[1]} pairs with M != ms;"
      f" worst relative difference early-pb vs base: {worst:.2e}")
