#!/usr/bin/env bash
# A/B of the equal shares' 0.98 margin where the uniform schedule is one wave that leaves SMs
# idle (bench/plans/s69/shares-one-wave.patch, in the working tree) against HEAD: bench/ab.sh,
# ROUNDS (3) rounds, B 16 at the harness's 40 shapes from 32k (14 of them change at 131k, by
# `schedule_choices --shares`), BF16, page 64 shuffled, the L2 dirtied as the harness leaves it.
#   bash bench/plans/s69/shares_wave.sh        (carry .debs)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
bash .debs/offline-debs.sh install .debs > /dev/null 2>&1
rm -rf /tmp/base && mkdir -p /tmp/base   # the working tree without the change: base
tar --exclude='./build*' --exclude=./.git --exclude=./.peer --exclude=./.debs -cf - . \
  | tar -x -C /tmp/base && (cd /tmp/base && patch -R -p1 -s < bench/plans/s69/shares-one-wave.patch)
(cd /tmp/base && grep -q "one_wave" src/common/schedule_step_shares.h) && { echo "base has the change"; exit 1; }
ROUNDS=${ROUNDS:-3} bash bench/ab.sh /tmp/base --batch 16 --heads 8,16,64,128 --qlen 1,2,4,9,16 \
  --prefix 32768,131072 --page-size 64 --tree chain --l2 dirty --reps 15 --min-reps 5 \
  --max-seconds 0.5
