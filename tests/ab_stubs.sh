# shellcheck shell=bash
# Sourced by tests/ab_order.sh and tests/ab_trees.sh: stubs that let bench/ab.sh and
# bench/ab_trees.sh run without a GPU or a build.
#   ab_stubs BIN LOG: BIN/nvidia-smi (compute capability 9.0) and BIN/cmake, whose
#   `cmake -S SRC -B DIR ...` makes DIR/mlaverify, a `bench` that appends "DIR's name, batch,
#   page_size, kv dtype" to LOG and writes a one-point CSV whose time_us is 100 x the number in
#   SRC/speed (10 without that file), or with --engine-csv (" eng" on LOG's line) a two-point
#   engine CSV whose run_us is that and exact_us 50, and a `check` that appends "DIR's name check
#   $MLAV_STUB_ENV" to LOG and fails where SRC/bad exists; `cmake --build` does nothing. Each
#   cmake command line is appended to LOG.cmake.
ab_stubs() {
  local bin=$1 log=$2
  mkdir -p "$bin"
  cat > "$bin/nvidia-smi" <<'X'
#!/bin/sh
case "$*" in *compute_cap*) echo "9.0" ;; *) echo "stub GPU, 0.0" ;; esac
X
  cat > "$bin/cmake" <<X
#!/bin/bash
echo "\$*" >> "$log.cmake"
[ "\$1" = "-S" ] || exit 0
mkdir -p "\$4"
sed -e "s|@SRC@|\$2|g" -e "s|@LOG@|$log|g" > "\$4/mlaverify" <<'Y'
#!/bin/bash
if [ "\$1" = check ]; then
  echo "\$(basename "\$(dirname "\$0")") check \${MLAV_STUB_ENV:-}" >> "@LOG@"
  [ ! -f "@SRC@/bad" ]; exit
fi
csv="" eng="" b=1 pg=64 kv=bf16
while [ \$# -gt 0 ]; do
  case \$1 in --csv) csv=\$2 ;; --engine-csv) eng=\$2 ;; --batch) b=\$2 ;; --page-size) pg=\$2 ;;
    --kv-dtype) kv=\$2 ;; esac
  shift
done
echo "\$(basename "\$(dirname "\$0")") \$b \$pg \$kv\${eng:+ eng}" >> "@LOG@"
t=10; [ -f "@SRC@/speed" ] && t=\$(awk '{printf "%.1f", 100 * \$1}' "@SRC@/speed")
if [ -n "\$eng" ]; then
  { echo "batch,heads,q_len,prefix,page_size,dtype,capacity,exact_us,step_us,run_us,update_us,run_over_exact"
    echo "1,8,9,4096,1,bf16,1.00,50,60,\$t,8,1"
    echo "16,8,16,4096,1,bf16,1.00,50,60,\$t,8,1"; } > "\$eng"
  exit 0
fi
printf 'backend,gpu,batch,heads,q_len,prefix,page_size,dtype,time_us\ncuda,stub,%s,8,1,4096,%s,bf16,%s\n' \
  "\$b" "\$pg" "\$t" > "\$csv"
Y
chmod +x "\$4/mlaverify"
X
  chmod +x "$bin/nvidia-smi" "$bin/cmake"
}
