#!/usr/bin/env bash
# session 11, device call 8: call 7's suite timed out on the multi-stream test under racecheck
# (240 s, inside its second flash case; 27 s in 9e57f42's suite). The same test (source
# unchanged since) 10 times plainly, then under racecheck with a longer limit, timed.
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
C=build-call8
tar -xJf $C/bins.tar.xz -C $C
{ for i in $(seq 10); do s=$SECONDS; timeout 60 $C/test_cuda_streams_gpu > /tmp/p.txt 2>&1; echo "plain run $i: rc=$? $((SECONDS - s))s $(grep -c 'bit-identical' /tmp/p.txt) cases"; done
  for i in 1 2; do s=$SECONDS; timeout 200 compute-sanitizer --tool racecheck --error-exitcode 99 $C/test_cuda_streams_gpu > /tmp/r.txt 2>&1; echo "racecheck run $i: rc=$? $((SECONDS - s))s"; grep -E "ok |SUMMARY|OK|FAIL" /tmp/r.txt; done
} > $OUT/streams.txt 2>&1
cat $OUT/streams.txt
