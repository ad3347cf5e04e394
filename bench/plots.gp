# Plots for bench/RESULTS.md.  Run in the work directory of a bench run
# (size.dat, handoff_*.cdf written by bench/report.lua), with
#   gnuplot -e "outdir='...'; have_size=1; have_handoff=1" plots.gp

if (!exists("outdir")) outdir = "."
if (!exists("have_size")) have_size = 1
if (!exists("have_handoff")) have_handoff = 1

set terminal pngcairo size 900,560 font "sans,10"
set grid
set key top left Left reverse samplen 2

# ---- cost vs size ----
if (have_size) {
set output outdir."/size.png"
set title "resty.shmlock.shdict: cost per operation vs number of keys (random access)"
set logscale x 10
set xrange [500:2000000]
set xlabel "keys in the zone"
set ylabel "ns per operation (median; bars: min-max)"
set yrange [0:*]
set xtics ("1e3" 1000, "1e4" 10000, "1e5" 100000, "1e6" 1000000)
plot "size.dat" using ($1*0.94):2:3:4 with yerrorlines lw 2 title "get", \
     "" using ($1*0.97):5:6:7 with yerrorlines lw 2 title "set", \
     "" using ($1*1.00):8:9:10 with yerrorlines lw 2 title "add", \
     "" using ($1*1.03):11:12:13 with yerrorlines lw 2 title "delete", \
     "" using ($1*1.06):14:15:16 with yerrorlines lw 2 title "incr", \
     "" using 1:17 with linespoints dt 2 lw 1 lc rgb "#777777" title "LuaJIT table get (memory-hierarchy reference)"
}

# ---- handoff latency distribution ----
if (have_handoff) {
set output outdir."/handoff.png"
set title "Lock handoff between 2 processes: release -> waiter's acquisition (CDF)"
set logscale x 10
set xrange [*:*]
set yrange [0:1]
set xtics auto
set format x "%g"
set xlabel "handoff latency, µs (log scale)"
set ylabel "fraction of handoffs"
set key bottom right
plot "handoff_futex.cdf"   using 1:2 with lines lw 2 title "C futex mutex (floor)", \
     "handoff_shmlock.cdf" using 1:2 with lines lw 2 title "resty.shmlock", \
     "handoff_flock.cdf"   using 1:2 with lines lw 2 title "flock(2)", \
     "handoff_polling.cdf" using 1:2 with lines lw 2 title "resty.lock algorithm (polling)"
}
