-- wrk script: POSTs one small V2 infer request (JSON) on every request, and prints its summary
-- as one JSON line (the line starting "wrk-summary ") for loadtests/bench_scaling.py to read.
--
--   wrk -t2 -c16 -d10s -s loadtests/wrk/infer.lua \
--       http://127.0.0.1:9200/v2/models/digits-mlp/infer [-- BODY_FILE]
--
-- BODY_FILE: the request body to send (default: one row of the digits test split, below).
-- Failures: wrk counts an answer with status >= 400 as a "status" error, and connect, read,
-- write and timeout errors apart; latencies are in microseconds.

local DIGITS_ROW = '{"inputs":[{"name":"input","shape":[1,64],"datatype":"FP32","data":['
  .. '0.0,0.0,7.0,16.0,14.0,3.0,0.0,0.0,0.0,0.0,9.0,14.0,11.0,15.0,0.0,0.0,'
  .. '0.0,0.0,1.0,5.0,0.0,15.0,5.0,0.0,0.0,0.0,0.0,0.0,0.0,16.0,5.0,0.0,'
  .. '0.0,0.0,0.0,0.0,3.0,16.0,4.0,0.0,0.0,0.0,0.0,1.0,12.0,14.0,1.0,0.0,'
  .. '0.0,0.0,5.0,12.0,16.0,16.0,14.0,1.0,0.0,0.0,8.0,16.0,14.0,10.0,13.0,3.0]}]}'

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = DIGITS_ROW

function init(args)
  if args[1] ~= nil then
    local file = assert(io.open(args[1], "rb"))
    wrk.body = file:read("*a")
    file:close()
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'wrk-summary {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,'
      .. '"status":%d,"timeout":%d,"p50_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.mean, latency.max))
end
