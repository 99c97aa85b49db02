#!/usr/bin/env bash
# Run the Railover demo: two processes stream to each other over two TCP rail
# instances on loopback, and the client moves the connection between rails
# every two seconds.  Usage: tools/demo.sh [build-dir]
set -euo pipefail
build=${1:-build}
demo=$build/tools/railover-demo
dir=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
export RAILOVER_RAILS=${RAILOVER_RAILS:-tcp@lo,tcp@127.0.0.1}
export RAILOVER_LOG=${RAILOVER_LOG:-info}
echo "RAILOVER_RAILS=$RAILOVER_RAILS"
"$demo" --listen "$dir/addr" --seconds 6 &
server=$!
client_rc=0; server_rc=0
"$demo" --connect "$dir/addr" --seconds 6 --switch-ms 2000 || client_rc=$?
wait $server || server_rc=$?
if [ $client_rc -eq 0 ] && [ $server_rc -eq 0 ]; then echo "demo: OK, nothing lost"; else echo "demo: FAILED"; exit 1; fi
