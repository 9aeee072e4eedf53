#!/usr/bin/env bash
# Whether the engine path's gap at B 1, 4096 is its blocks past the step: the production preset
# through the engine path (limits 1.0) on the checkout, with stepgrid.patch, whose run alone is
# captured on a grid of the step's own items (the header's count, read by the bench after the
# step's update; the library's launch takes it from MLAV_EXP_STEP_GRID) in place of the limits'
# grid (an experiment, never to land), and with steplast.patch, the step's items on the grid's
# last blocks (a candidate). Run / exact at the six B 1, 4096 points that ran 1.066-1.179
# (session 46): with stepgrid ~1.00-1.02 if the blocks past the step are the cost; with steplast
# as low if what they cost is the combine's programmatic launch, which waits for all of the
# split grid's blocks to have started (after the step's own, where the step fills the SMs), and
# not their dispatch (condgrid's spinning blocks, without a programmatic launch, cost 0.3-0.4 us).
# bench/ab_trees.sh's eng config, 2 rounds rotating; ~400-550 s (carry .debs).
#   bash bench/plans/s57/stepgrid.sh
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
CONFIGS=${CONFIGS:-eng:2} BUDGET=${BUDGET:-560} \
  bash bench/ab_trees.sh base grid=bench/plans/s57/stepgrid.patch \
  last=bench/plans/s57/steplast.patch
