-- wrk script: one machine-readable line at the end of a run.
-- WRK requests errors(non-2xx + socket) p50 p90 p99 p99.9 max mean (µs) rps
done = function(summary, latency)
    local e = summary.errors
    local errors = e.connect + e.read + e.write + e.status + e.timeout
    io.write(string.format("WRK\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\n",
        summary.requests, errors,
        latency:percentile(50), latency:percentile(90),
        latency:percentile(99), latency:percentile(99.9),
        latency.max, latency.mean,
        summary.requests / (summary.duration / 1e6)))
end
