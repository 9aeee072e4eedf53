# Plot `mlaverify bench --csv` output: time vs prefix (log-log), one line per (backend, q_len),
# and the ceiling floor max(FLOPs / mma ceiling, bytes / copy ceiling) per q_len, dashed.
# The floor needs no extra file: tflops = FLOPs/time and frac_mma = tflops/ceiling, so
# FLOPs/ceiling = time_us * frac_mma (likewise for bytes), floor = time_us * max(frac_mma, frac_bw).
#
#   gnuplot -e "csv='bench/results/h200.csv'; out='bench/results/h200.png'" bench/plot.gp
# Optional: heads=64 batch=1 page=1 (the point set drawn), backends='cuda cuda-naive',
# qlens='1 9 33', floor_backend='cuda' (whose rows give the floor), title='...'.
# CSV columns: 1 backend, 2 gpu, 3 batch, 4 heads, 5 q_len, 6 prefix, 7 page_size, 8 dtype,
#              9 time_us, 10 tflops, 11 gbps, 12 frac_mma, 13 frac_bw ("nan" where n/a)

if (!exists("csv")) csv = "bench.csv"
if (!exists("out")) out = csv[1:strlen(csv)-4] . ".png"
if (!exists("heads")) heads = 64
if (!exists("batch")) batch = 1
if (!exists("page")) page = 1
if (!exists("backends")) backends = "cuda cuda-naive"
if (!exists("qlens")) qlens = "1 9 33"
if (!exists("floor_backend")) floor_backend = word(backends, 1)
device = system(sprintf("awk -F, 'NR==2 {print $2; exit}' '%s'", csv))
if (!exists("title")) title = sprintf("MLA verify, B=%d H=%d page\\_size=%d, %s", batch, heads, page, device)

set terminal pngcairo size 1200,800 font ",11"
set output out
set datafile separator ","
set datafile missing NaN
set logscale xy
set format x "%.0f"
set format y "%g"
set xlabel "prefix (KV rows before the draft)"
set ylabel "time per verify (us, median)"
set title title
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set key left top box opaque

sel(b, q) = (strcol(1) eq b && $3 == batch && $4 == heads && $7 == page && $5 == q)
tm(b, q) = sel(b, q) && $9 == $9 ? $9 : NaN
fl(q) = sel(floor_backend, q) && $9 == $9 ? $9 * ($12 > $13 ? $12 : $13) : NaN

plot for [b in backends] for [q in qlens] csv every ::1 using 6:(tm(b, q + 0)) \
         with linespoints pt 7 ps 0.8 title sprintf("%s, q\\_len %s", b, q), \
     for [i = 1:words(qlens)] csv every ::1 using 6:(fl(word(qlens, i) + 0)) \
         with lines lw 1.5 lc rgb "gray30" dt i+1 title sprintf("floor, q\\_len %s", word(qlens, i))
