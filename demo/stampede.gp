# The latency distribution of demo/stampede.lua's three runs, as the share
# of callers served by each moment (a CDF).  Run by the demo:
#   gnuplot -c demo/stampede.gp WITH.dat WITHOUT.dat STALE.dat OUT.png \
#           N MS SLOTS "CALLS_WITH CALLS_WITHOUT CALLS_STALE"

with_file     = ARG1
without_file  = ARG2
stale_file    = ARG3
out           = ARG4
n             = ARG5 + 0
ms            = ARG6 + 0
slots         = ARG7 + 0
calls_with    = word(ARG8, 1) + 0
calls_without = word(ARG8, 2) + 0
calls_stale   = word(ARG8, 3) + 0

stats with_file using 1 nooutput
max_with = STATS_max
stats without_file using 1 nooutput
max_without = STATS_max
stats stale_file using 1 nooutput
median_stale = STATS_median

set terminal pngcairo size 960,560 enhanced font "sans,11" linewidth 1.5
set output out

backend = (slots > 0) \
    ? sprintf("the backend runs %d queries at a time", slots) \
    : "the backend runs any number of queries at once"
title1 = sprintf("Cache stampede: %d processes ask for the same key at once", n)
title2 = sprintf("the loader is a %d ms backend query; %s", ms, backend)
set title sprintf("{/:Bold %s}\n{/*0.9 %s}", title1, title2)

set xlabel "time from the start until each caller has the value (ms)"
set ylabel "callers served (%)"
set xrange [0:*]
set yrange [0:108]
set ytics 0, 25, 100
set grid xtics ytics lc rgb "#dddddd" lw 1
set border 3
set tics nomirror
set key right bottom box opaque width 1 spacing 1.3

set arrow from ms, graph 0 to ms, graph 1 nohead dt 2 lc rgb "#888888" lw 1
set label "one backend query" at ms, graph 0.97 offset 0.6, 0 \
    left textcolor rgb "#666666" font "sans,9"

set label sprintf("all served in %.0f ms", max_with) at max_with, 100 \
    offset 1, -1.2 left textcolor rgb "#1f77b4"
set label sprintf("last served at %.0f ms", max_without) at max_without, 100 \
    offset 0, 1 center textcolor rgb "#d62728"
set label sprintf("half served in %.1f ms", median_stale) at median_stale, 50 \
    offset 1, 0 left textcolor rgb "#2ca02c"

plural(k) = (k == 1) ? "" : "s"
plot with_file using 1:($2 * 100) with steps lw 3 lc rgb "#1f77b4" \
         title sprintf("with resty.shmlock.cache: %d loader call%s", \
                       calls_with, plural(calls_with)), \
     without_file using 1:($2 * 100) with steps lw 3 lc rgb "#d62728" \
         title sprintf("without a lock: %d loader call%s", \
                       calls_without, plural(calls_without)), \
     stale_file using 1:($2 * 100) with steps lw 3 lc rgb "#2ca02c" \
         title sprintf("with stale\\_ttl, the key stale: %d loader call%s", \
                       calls_stale, plural(calls_stale))
