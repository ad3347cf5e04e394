# The latency distribution of demo/stampede.lua's two runs, as the share
# of callers served by each moment (a CDF).  Run by the demo:
#   gnuplot -c demo/stampede.gp WITH.dat WITHOUT.dat OUT.png \
#           N MS SLOTS CALLS_WITH CALLS_WITHOUT

with_file     = ARG1
without_file  = ARG2
out           = ARG3
n             = ARG4 + 0
ms            = ARG5 + 0
slots         = ARG6 + 0
calls_with    = ARG7 + 0
calls_without = ARG8 + 0

stats with_file using 1 nooutput
max_with = STATS_max
stats without_file using 1 nooutput
max_without = STATS_max

set terminal pngcairo size 960,560 enhanced font "sans,11" linewidth 1.5
set output out

backend = (slots > 0) \
    ? sprintf("the backend runs %d queries at a time", slots) \
    : "the backend runs any number of queries at once"
title1 = sprintf("Cache stampede: %d processes miss the same key at once", n)
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

plural(k) = (k == 1) ? "" : "s"
plot with_file using 1:($2 * 100) with steps lw 3 lc rgb "#1f77b4" \
         title sprintf("with resty.shmlock.cache: %d loader call%s", \
                       calls_with, plural(calls_with)), \
     without_file using 1:($2 * 100) with steps lw 3 lc rgb "#d62728" \
         title sprintf("without a lock: %d loader call%s", \
                       calls_without, plural(calls_without))
