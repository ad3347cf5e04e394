# The latency distribution of demo/fleet.lua's four runs, as the share of
# callers served by each moment (a CDF).  Run by the demo:
#   gnuplot -c demo/fleet.gp DIR OUT.png HOSTS N MS \
#           "CALLS CMDS (host) CALLS CMDS (recipe) CALLS CMDS (fleet) ..."
# DIR holds host.dat, recipe.dat, fleet.dat and stale_down.dat.

dir   = ARG1
out   = ARG2
hosts = ARG3 + 0
n     = ARG4 + 0
ms    = ARG5 + 0
calls(i) = word(ARG6, 2 * i - 1) + 0
cmds(i)  = word(ARG6, 2 * i) + 0

set terminal pngcairo size 960,560 enhanced font "sans,11" linewidth 1.5
set output out

title1 = sprintf("The fleet case: %d hosts x %d processes ask for one cold key at once", hosts, n)
title2 = sprintf("the loader is a %d ms backend query; one Redis", ms)
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

line(i) = sprintf("%d loader call%s, %d Redis commands", calls(i), \
                  calls(i) == 1 ? "" : "s", cmds(i))
plot dir . "/host.dat" using 1:($2 * 100) with steps lw 3 lc rgb "#7f7f7f" \
         title "host tier alone: " . line(1), \
     dir . "/recipe.dat" using 1:($2 * 100) with steps lw 3 lc rgb "#d62728" \
         title "lock recipe (opts.lock): " . line(2), \
     dir . "/fleet.dat" using 1:($2 * 100) with steps lw 3 lc rgb "#1f77b4" \
         title "fleet tier (opts.redis): " . line(3), \
     dir . "/stale_down.dat" using 1:($2 * 100) with steps lw 3 lc rgb "#2ca02c" \
         title "Redis stopped, key stale: " . line(4)
