-- wrk reporter: one machine-readable line with the percentiles wrk --latency omits.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d p50_us=%d p90_us=%d p99_us=%d p995_us=%d p999_us=%d non2xx=%d errors=%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.5), latency:percentile(99.9),
    e.status, e.connect + e.read + e.write + e.timeout))
end
