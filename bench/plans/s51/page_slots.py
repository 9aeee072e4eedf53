#!/usr/bin/env python3
"""The schedule of page-async.patch's page-id slots, replayed for one thread: every cp.async group
the keys kernel commits, what cp.async.wait_group<AHEAD - 1> guarantees at each tile, and each
slot's writes and reads. Checks, for every tile count 1..40, that each gather reads its tile's page
ids from a copy that has landed (its group complete), and that the next copy into that slot is
issued at a later tile than the read (in the same tile it would race the thread's own ld.shared:
cp.async's writes are not ordered with the thread's earlier loads). Prints MISMATCH and exits 1 otherwise; run with a wrong ring size
(--stages 3) or lead (--lead 5) to see it fail."""
import argparse
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--stages", type=int, default=4)  # KSTAGES: the page slots' ring
ap.add_argument("--ahead", type=int, default=3)   # AHEAD
ap.add_argument("--lead", type=int, default=6)    # tiles between the copy's issue and... 2 AHEAD
a = ap.parse_args()

bad = 0
for n in range(1, 41):
    groups = []          # per committed group: the (tile, slot) page copies in it
    slot_tile = {}       # slot -> tile of the last copy issued into it
    events = []          # ("read", tile) checks

    read_at = {}         # tile -> the tile index at which its page ids were read

    def issue(tile, cur, now):
        global bad
        prev = slot_tile.get(tile % a.stages)
        if prev is not None and prev < n and prev >= a.ahead and read_at.get(prev, now) >= now:
            print(f"MISMATCH n={n}: tile {tile}'s copy into slot {tile % a.stages} issued at tile"
                  f" {now}, tile {prev}'s read there at {read_at.get(prev)}")
            bad += 1
        cur.append((tile, tile % a.stages))
        slot_tile[tile % a.stages] = tile

    def landed_tiles(done):  # tiles whose page copy is in a complete group
        return {t for g in groups[:done] for (t, _) in g}

    # prologue: tiles 0..AHEAD-1 gathered with synchronous page ids; copies of tiles AHEAD..2AHEAD-1
    for t in range(a.ahead):
        cur = []
        if t + a.ahead < n:
            issue(t + a.ahead, cur, -1)
        groups.append(cur)
    for t in range(n):
        done = max(0, len(groups) - (a.ahead - 1))   # wait_group<AHEAD-1>
        if t + a.ahead < n:
            u = t + a.ahead
            if u not in landed_tiles(done):
                print(f"MISMATCH n={n}: tile {u}'s page ids read at tile {t} before their group landed")
                bad += 1
            elif slot_tile.get(u % a.stages) != u:
                print(f"MISMATCH n={n}: slot {u % a.stages} holds tile {slot_tile.get(u % a.stages)}'s"
                      f" copy when tile {u} reads it")
                bad += 1
            read_at[u] = t
        cur = []
        if t + a.lead < n:
            issue(t + a.lead, cur, t)
        groups.append(cur)

print("page slots: %s (stages %d, ahead %d, lead %d, tile counts 1..40)"
      % ("ok" if not bad else "%d MISMATCH" % bad, a.stages, a.ahead, a.lead))
sys.exit(1 if bad else 0)
