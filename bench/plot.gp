# Plot `mlaverify bench --csv` output: time vs prefix (log-log), one line per (backend, q_len),
# and the ceiling floor max(FLOPs / mma ceiling, bytes / copy ceiling) per q_len, dashed.
# The floor needs no extra file: tflops = FLOPs/time and frac_mma = tflops/ceiling, so
# FLOPs/ceiling = time_us * frac_mma (likewise for bytes), floor = time_us * max(frac_mma, frac_bw).
#
#   gnuplot -e "csv='bench/results/h200.csv'; out='bench/results/h200.png'" bench/plot.gp
# Optional: heads=64 batch=1 page=1 (the point set drawn; default the CSV's first row's),
# backends='cuda cuda-naive' (default every backend in the CSV), qlens='1 9 33' (default those of
# the drawn point set), floor_backend='cuda' (whose rows give the floor; default the first
# backend), title='...'. A CSV with no row to draw is refused with a sentence and no PNG.
# A `--kv-dtype` CSV has a row per KV dtype: kv='same' (default) draws the rows whose cache has
# the q dtype, kv='fp8_e4m3' the FP8 ones. mode='fp8' draws instead fp8_speedup (the q-dtype
# cache's time / the FP8 cache's) vs prefix, one line per (backend, q_len), with the targets of
# issue 25 (1.6 where memory-bound, 0.97 where tensor-bound) as gray lines:
#   gnuplot -e "csv='bench-fp8.csv'; out='fp8-h8.png'; heads=8; qlens='1 9 16 64'; mode='fp8'" bench/plot.gp
# CSV columns: 1 backend, 2 gpu, 3 batch, 4 heads, 5 q_len, 6 prefix, 7 page_size, 8 dtype,
#              9 time_us, 10 tflops, 11 gbps, 12 frac_mma, 13 frac_bw ("nan" where n/a);
#              with --kv-dtype 14 kv_dtype, 15 fp8_speedup; then min_us, max_us (the spread)

if (!exists("csv")) csv = "bench.csv"
if (!exists("out")) out = csv[1:strlen(csv)-4] . ".png"
# defaults from the CSV itself, so that any bench CSV (a GPU's or a CPU's) draws as it is: the
# first row's batch, heads and page size, every backend in it, and the q_lens of those rows
if (!exists("batch")) batch = system(sprintf("awk -F, 'NR==2 {print $3; exit}' '%s'", csv)) + 0
if (!exists("heads")) heads = system(sprintf("awk -F, 'NR==2 {print $4; exit}' '%s'", csv)) + 0
if (!exists("page")) page = system(sprintf("awk -F, 'NR==2 {print $7; exit}' '%s'", csv)) + 0
if (!exists("backends")) backends = system(sprintf("awk -F, 'NR>1 && !s[$1]++ {printf \"%%s \", $1}' '%s'", csv))
if (!exists("qlens")) qlens = system(sprintf("awk -F, 'NR>1 && $3==%d && $4==%d && $7==%d && !s[$5]++ {printf \"%%s \", $5}' '%s' | tr ' ' '\\n' | sort -n | tr '\\n' ' '", batch, heads, page, csv))
if (!exists("floor_backend")) floor_backend = word(backends, 1)
if (!exists("kv")) kv = "same"
if (!exists("mode")) mode = "time"
if (mode ne "time" && mode ne "fp8") { print "plot.gp: mode is 'time' or 'fp8'"; exit status 2 }
# no PNG at all rather than an empty one: the output is opened only once some row will be drawn
rows = system(sprintf("awk -F, -v b=' %s ' 'NR>1 && index(b, \" \" $1 \" \") && $3==%d && $4==%d && $7==%d && $9 != \"nan\"' '%s' | wc -l", backends, batch, heads, page, csv)) + 0
if (rows == 0 || words(qlens) == 0) {
    print sprintf("plot.gp: no measured row of %s has backend in '%s', batch %d, heads %d, page_size %d: nothing drawn, %s not written", csv, backends, batch, heads, page, out)
    exit status 1
}
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
unset output
