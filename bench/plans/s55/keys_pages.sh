#!/usr/bin/env bash
# The landed keys kernel's bulk copies (7b7e8d2) where no GPU has run them: test_sm90_keys's page
# sizes 16, 128 and 256 (added after session 53's run), then test_fp8, then memcheck and initcheck
# of test_sm90_keys (2 cases a group; initcheck has not run on the keys kernel since 7b7e8d2).
# For a call too short for the suite's tests part (~375 s). The steps are
# bench/plans/s54/keys_steps.sh's on the checkout as it is (no PATCH), each capped by what is left
# of CAP (420) s; logs in $OUT/o.tgz.
PATCH= EXTRA_TARGETS=test_fp8 NO_TEST_BUILD= CAP=${CAP:-420}
source bench/plans/s54/keys_steps.sh
keys_test
(cd $B && timeout --kill-after=5 $(lim 120) ctest -R '^test_fp8$' --output-on-failure) \
  > $O/fp8.log 2>&1
echo "test_fp8 rc=$?"; grep -E "tests passed|Failed" $O/fp8.log | tail -2; el fp8
sanitize memcheck initcheck
