#!/usr/bin/env bash
# ctest test_cli_bench_plot: bench's picture, progress and spread on the CPU (small grid).
#   1. bench --plot on cpu and reference: a PNG (its signature checked), the CSV's last columns
#      min_us,max_us bracket time_us, progress lines on stderr once past 2 s of points;
#   2. bench/plot.gp with its defaults on that CPU CSV draws a PNG; asked for rows the CSV does
#      not have, it says so and writes no file;
#   3. bench --plot with no gnuplot on PATH: status 2 and a sentence before measuring, no file.
# Skipped (77) without gnuplot.
#   bench_plot.sh MLAVERIFY PLOT_GP WORK_DIR
set -euo pipefail
mlav=$1 plotgp=$2 work=$3
command -v gnuplot > /dev/null || { echo "test_cli_bench_plot: no gnuplot on PATH: skipped"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
is_png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

echo "== bench --plot (cpu, reference; 6 points of about 0.5 s)"
"$mlav" bench --backend cpu,reference --heads 4 --qlen 1,4 --prefix 256,1024,4096 --reps 100000 \
  --min-reps 2 --max-seconds 0.25 --csv b.csv --plot b.png > table.txt 2> progress.txt \
  || { cat table.txt progress.txt; fail "bench --plot"; }
is_png b.png || fail "b.png is not a PNG"
grep -q '^# plot: b.png' table.txt || fail "the table does not name the plot"
ls b.png.* 2> /dev/null && fail "a temporary file was left beside b.png"
grep -Eq 'point [0-9]+/6 \(B=1 H=4 q_len [0-9]+ prefix [0-9]+\) done, [0-9]+ s elapsed, about [0-9]+ s left' \
  progress.txt || { cat progress.txt; fail "no progress line on stderr"; }
head -n1 b.csv | grep -q ',min_us,max_us$' || fail "the CSV lacks min_us,max_us"
awk -F, 'NR > 1 && !($14 <= $9 && $9 <= $15) {bad = 1; print} END {exit bad}' b.csv \
  || fail "a row's median is outside its min..max"
grep -q 'flash_min..max_us' table.txt || fail "the table lacks the spread column"
echo "ok: $(stat -c %s b.png) bytes; $(grep -c 'point' progress.txt) progress line(s), the last: $(tail -n1 progress.txt)"

echo "== bench/plot.gp with its defaults on the CPU CSV"
gnuplot -e "csv='b.csv'; out='gp.png'" "$plotgp" || fail "plot.gp on a CPU CSV"
is_png gp.png || fail "plot.gp wrote no PNG"
rc=0; gnuplot -e "csv='b.csv'; out='none.png'; heads=99" "$plotgp" > none.txt 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "plot.gp with no row to draw succeeded"
[ ! -e none.png ] || fail "plot.gp left none.png ($(stat -c %s none.png) bytes)"
grep -q 'nothing drawn' none.txt || { cat none.txt; fail "plot.gp did not say why"; }
echo "ok: gp.png $(stat -c %s gp.png) bytes; no rows: $(cat none.txt)"

echo "== bench --plot without gnuplot"
mkdir -p nognuplot
rc=0; PATH=$work/nognuplot "$mlav" bench --backend reference --heads 1 --qlen 1 --prefix 8 \
  --plot x.png > x.txt 2> x-err.txt || rc=$?
[ "$rc" -eq 2 ] || fail "status $rc"
grep -q 'needs gnuplot, which is not on PATH' x-err.txt || { cat x-err.txt; fail "no sentence"; }
[ ! -e x.png ] && [ ! -s x.txt ] || fail "something was written or measured"
echo "ok: $(cat x-err.txt)"
echo "test_cli_bench_plot: passed"
