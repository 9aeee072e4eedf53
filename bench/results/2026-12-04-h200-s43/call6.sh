#!/usr/bin/env bash
# Session 43 call 6: the suite on 6de13a3 within one device call (carry .debs), the benches,
# python-cuda, sglang-bench, step-costs and four sanitizer steps left out for time.
COMMIT=6de13a3 SUITE_BUDGET=540 \
  SKIP_STEPS="step-costs python-cuda sglang-bench bench bench-fp8 memcheck-backends memcheck-steps memcheck-hostile racecheck-streams" \
  bash bench/gpu-suite.sh > /dev/null 2>&1
tail -40 "$OUT/suite.log"
