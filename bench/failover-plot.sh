#!/usr/bin/env bash
# Throughput through a failover and a failback, as a picture.
#
# One rov_stream connection streams both ways in the two namespaces of
# bench/failover-time.py (rate rows every 20 ms); the fabric is dropped
# silently 1.5 s in, healed 2 s after traffic moved, and the run ends 1.5 s
# after traffic is back on the fabric.  Writes
#
#   DIR/throughput.csv          t_s,side,rail,rx_mb_s,... (t_s: seconds since the
#                               stream was up, centre of each rate interval)
#   DIR/throughput-events.csv   the benchmark's marks and both sides' switch,
#                               rail_down and first_rx events on the same clock
#   DIR/throughput.gp, .png     the gnuplot script and its picture
#
# usage: failover-plot.sh [--out DIR] [failover-time.py options, e.g. --dwell 2s]
# (default DIR: ./failover-plot-YYYYmmdd-HHMMSS).  Needs root, ip, nft, gnuplot.
set -euo pipefail
script_dir=$(cd "$(dirname "$0")" && pwd)
out=
args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) args+=("$1"); shift ;;
    esac
done
[ -n "$out" ] || out=failover-plot-$(date +%Y%m%d-%H%M%S)
if ! command -v gnuplot >/dev/null 2>&1; then
    echo "failover-plot: gnuplot is not installed (apt-get install -y gnuplot-nox);" \
         "the CSV files and the gnuplot script are still written" >&2
fi
exec python3 "$script_dir/failover-time.py" --runs 0 --plot --out "$out" "${args[@]}"
