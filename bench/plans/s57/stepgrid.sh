#!/usr/bin/env bash
# Whether the engine path's gap at B 1, 4096 is its blocks past the step: the production preset
# through the engine path (limits 1.0) on the checkout and with stepgrid.patch, whose run alone
# is captured on a grid of the step's own items (the header's count, read by the bench after the
# step's update; the library's launch takes it from MLAV_EXP_STEP_GRID) in place of the limits'
# grid. An experiment, never to land: run / exact at the six B 1, 4096 points that ran 1.066-1.179
# (session 46) falls to ~1.00-1.02 if the blocks past the step are the cost, and stays if not.
# bench/ab_trees.sh's eng config, 2 rounds alternating; ~300-450 s (carry .debs).
#   bash bench/plans/s57/stepgrid.sh
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
CONFIGS=${CONFIGS:-eng:2} BUDGET=${BUDGET:-560} \
  bash bench/ab_trees.sh base grid=bench/plans/s57/stepgrid.patch
