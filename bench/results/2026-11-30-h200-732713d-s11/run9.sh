#!/usr/bin/env bash
# session 11, device call 9: does the multi-stream test's stall under racecheck need PDL? The
# test built from 426cc69 (head) and from the same tree with the plan's PDL off (nopdl), each
# under racecheck, interleaved, 55 s limit per run (a passing run took 27-33 s).
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call9
tar -xJf $C/bins.tar.xz -C $C
{ for v in nopdl head nopdl head nopdl; do s=$SECONDS
    timeout 55 compute-sanitizer --tool racecheck --error-exitcode 99 $C/streams-$v > /tmp/r.txt 2>&1; rc=$?
    echo "$v: rc=$rc $((SECONDS - s))s, $(grep -c 'bit-identical' /tmp/r.txt) of 3 cases, $(grep -o 'RACECHECK SUMMARY.*' /tmp/r.txt)"
  done
} > $OUT/streams-pdl.txt 2>&1
cat $OUT/streams-pdl.txt
