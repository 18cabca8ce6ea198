#!/usr/bin/env bash
# node_exporter beside the node role (docs/benchmarks.md, "Task collection at 110 pods"):
# Debian's prometheus-node-exporter with its default collectors on 127.0.0.1, WARMUP scrapes,
# then SCRAPES sequential scrapes with curl (Accept: text/plain, no compression); CPU per scrape
# is utime+stime of the exporter over the loop / SCRAPES, RSS is VmRSS/VmHWM right after.
# The same method as the node-role rows of benches/task_collect.rs. Usage:
#   SCRAPES=200 benches/node_exporter_side.sh
set -euo pipefail
NE=${NE:-/usr/bin/prometheus-node-exporter}
SCRAPES=${SCRAPES:-200}
WARMUP=${WARMUP:-20}
PORT=${PORT:-$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')}
[ -x "$NE" ] || { echo "no $NE: apt-get install prometheus-node-exporter" >&2; exit 1; }
"$NE" --web.listen-address=127.0.0.1:$PORT >/dev/null 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null || true' EXIT
URL=http://127.0.0.1:$PORT/metrics
for _ in $(seq 50); do curl -sf -o /dev/null "$URL" && break; sleep 0.1; done
for _ in $(seq "$WARMUP"); do curl -sf -o /dev/null -H 'Accept: text/plain' "$URL"; done
ticks() { awk '{print $14+$15}' "/proc/$PID/stat"; }
T0=$(ticks)
BYTES=0
for _ in $(seq "$SCRAPES"); do
  B=$(curl -sf -H 'Accept: text/plain' "$URL" | wc -c); BYTES=$((BYTES + B))
done
T1=$(ticks)
HZ=$(getconf CLK_TCK)
SERIES=$(curl -sf -H 'Accept: text/plain' "$URL" | grep -vc '^#')
echo "node_exporter $("$NE" --version 2>&1 | head -1)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v t=$((T1 - T0)) -v hz="$HZ" -v n="$SCRAPES" 'BEGIN{printf "CPU per scrape: %.2f ms (%d ticks over %d scrapes)\n", t*1000/hz/n, t, n}'
echo "bytes per scrape: $((BYTES / SCRAPES)); series: $SERIES"
grep -E 'VmRSS|VmHWM' "/proc/$PID/status"
