# Plot `mlaverify bench --csv` output: time vs prefix (log-log), one line per (backend, q_len),
# and the ceiling floor max(FLOPs / mma ceiling, bytes / copy ceiling) per q_len, dashed.
# The floor needs no extra file: tflops = FLOPs/time and frac_mma = tflops/ceiling, so
# FLOPs/ceiling = time_us * frac_mma (likewise for bytes), floor = time_us * max(frac_mma, frac_bw).
#
#   gnuplot -e "csv='bench/results/h200.csv'; out='bench/results/h200.png'" bench/plot.gp
# Optional: heads=64 batch=1 page=1 (the point set drawn), backends='cuda cuda-naive',
# qlens='1 9 33', floor_backend='cuda' (whose rows give the floor), title='...'.
# A `--kv-dtype` CSV has a row per KV dtype: kv='same' (default) draws the rows whose cache has
# the q dtype, kv='fp8_e4m3' the FP8 ones. mode='fp8' draws instead fp8_speedup (the q-dtype
# cache's time / the FP8 cache's) vs prefix, one line per (backend, q_len), with the targets of
# issue 25 (1.6 where memory-bound, 0.97 where tensor-bound) as gray lines:
#   gnuplot -e "csv='bench-fp8.csv'; out='fp8-h8.png'; heads=8; qlens='1 9 16 64'; mode='fp8'" bench/plot.gp
# CSV columns: 1 backend, 2 gpu, 3 batch, 4 heads, 5 q_len, 6 prefix, 7 page_size, 8 dtype,
#              9 time_us, 10 tflops, 11 gbps, 12 frac_mma, 13 frac_bw ("nan" where n/a);
#              with --kv-dtype 14 kv_dtype, 15 fp8_speedup

if (!exists("csv")) csv = "bench.csv"
if (!exists("out")) out = csv[1:strlen(csv)-4] . ".png"
if (!exists("heads")) heads = 64
if (!exists("batch")) batch = 1
if (!exists("page")) page = 1
if (!exists("backends")) backends = "cuda cuda-naive"
if (!exists("qlens")) qlens = "1 9 33"
if (!exists("floor_backend")) floor_backend = word(backends, 1)
if (!exists("kv")) kv = "same"
if (!exists("mode")) mode = "time"
if (mode ne "time" && mode ne "fp8") print "plot.gp: mode is 'time' or 'fp8'"; exit
device = system(sprintf("awk -F, 'NR==2 {print $2; exit}' '%s'", csv))
if (!exists("title")) title = mode eq "fp8" ? \
    sprintf("FP8 KV cache against the q dtype's, B=%d H=%d page\\_size=%d, %s", batch, heads, page, device) : \
    sprintf("MLA verify, B=%d H=%d page\\_size=%d, %s", batch, heads, page, device)

set terminal pngcairo size 1200,800 font ",11"
set output out
set datafile separator ","
set datafile missing NaN
set format x "%.0f"
set format y "%g"
set xlabel "prefix (KV rows before the draft)"
set title title
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set key left top box opaque

# the row's cache: a CSV without --kv-dtype has no column 14 (every row has the q dtype's cache,
# and strcol(14) would be an error)
has_kv = system(sprintf("head -n1 '%s' | grep -c ',kv_dtype'", csv)) + 0
kvrow(k) = !has_kv ? k eq "same" : k eq "same" ? strcol(14) eq strcol(8) : strcol(14) eq k
sel(b, q) = (strcol(1) eq b && $3 == batch && $4 == heads && $7 == page && $5 == q)
tm(b, q) = sel(b, q) && kvrow(kv) && $9 == $9 ? $9 : NaN
fl(q) = sel(floor_backend, q) && kvrow(kv) && $9 == $9 ? $9 * ($12 > $13 ? $12 : $13) : NaN
fp8(b, q) = has_kv && sel(b, q) && strcol(14) eq "fp8_e4m3" && $15 == $15 ? $15 : NaN

if (mode eq "fp8") {
    set logscale x
    set ylabel "fp8\\_speedup (time with the q-dtype cache / with the FP8 cache)"
    set yrange [0:*]
    plot for [b in backends] for [q in qlens] csv every ::1 using 6:(fp8(b, q + 0)) \
             with linespoints pt 7 ps 0.8 title sprintf("%s, q\\_len %s", b, q), \
         1.6 with lines lw 1.5 lc rgb "gray30" dt 2 title "1.6 (memory-bound target)", \
         0.97 with lines lw 1.5 lc rgb "gray30" dt 3 title "0.97 (tensor-bound target)"
} else {
    set logscale xy
    set ylabel "time per verify (us, median)"
    plot for [b in backends] for [q in qlens] csv every ::1 using 6:(tm(b, q + 0)) \
             with linespoints pt 7 ps 0.8 title sprintf("%s, q\\_len %s", b, q), \
         for [i = 1:words(qlens)] csv every ::1 using 6:(fl(word(qlens, i) + 0)) \
             with lines lw 1.5 lc rgb "gray30" dt i+1 title sprintf("floor, q\\_len %s", word(qlens, i))
}
