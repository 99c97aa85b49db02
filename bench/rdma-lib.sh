# shellcheck shell=bash
# Sourced by the two-VM benchmark jobs (bench/rdma-*.sh), which run in VM a
# under tests/vm/vmrun --two with tests/vm/guest-lib.sh already sourced
# (rexec, log, testbed_broken, RDMA_DEV, PEER_ETH, ...).
#
#   rec WORDS...          append one measurement line to $out (the sourcing
#                         script sets it) and print it;
#                         a failed one (a word "nan") on a fabric that no
#                         longer carries a ping ends the job with 75, which
#                         vmrun repeats the run for (tests/vm/README.md)
#   json_field NAME       a field of the `railover perf --json` line on stdin
#   perftest TOOL ARGS... a perftest pair (server on b, client here, port
#                         next_port), printing the client's data line; its
#                         halves: perftest_server (next_port, then the
#                         server) and perftest_client (on $port)
#   ucxperf ARGS...       the same for ucx_perftest with $ucx_env, printing
#                         the client's Final line (logs in $VMOUT)
#   next_port             a fresh server port in $port (a file keeps the
#                         count, as the tools often run in $(...) subshells)
#   AWK_MEDIAN            awk source of median(s): the median of the numbers
#                         in the string s
#   ucx_env               the UCX settings of every UCX run, raw or Railover

ucx_env="UCX_TLS=rc_verbs,tcp UCX_NET_DEVICES=$RDMA_DEV:$RDMA_PORT,$ETH_IF UCX_RC_VERBS_RETRY_COUNT=6"
# UCX's default rendezvous reads (get_zcopy); bench/rdma-perf.sh says why put.
ucx_env="$ucx_env UCX_RNDV_SCHEME=put_zcopy"

_bench_portf=$(mktemp)
echo "${BENCH_PORT0:-18515}" > "$_bench_portf"
trap 'rm -f "$_bench_portf"' EXIT
next_port() { port=$(($(cat "$_bench_portf") + 1)); echo "$port" > "$_bench_portf"; }

# (In a subshell, e.g. a `... | while read` loop, the 75 ends only that
# subshell; the job's next failed measurement ends the job.)
# shellcheck disable=SC2154   # $out: set by the sourcing script
rec() {
    echo "$*" | tee -a "$out"
    case " $* " in
    *" nan "*) testbed_broken "a measurement failed: $*" ;;
    esac
}

json_field() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }

perftest_server() { # TOOL ARGS...
    local t=$1
    shift
    next_port
    rexec "timeout 60 $t -d $RDMA_DEV -x $RDMA_GID_IDX -F -p $port $* > /tmp/pt.log 2>&1 &"
    sleep 1.5
}
perftest_client() { # TOOL ARGS...
    local t=$1
    shift
    timeout 60 "$t" -d "$RDMA_DEV" -x "$RDMA_GID_IDX" -F -p $port "$@" "$PEER_ETH" 2>&1 |
        awk '/^ *#bytes/ { hdr = 1; next } hdr && NF > 3 { print; exit }'
}
perftest() { # TOOL ARGS...
    perftest_server "$@"
    perftest_client "$@"
}

ucxperf() { # ARGS...
    next_port
    rexec "env $ucx_env timeout 60 ucx_perftest -p $port > $VMOUT/ucx_perftest.$port.server.log 2>&1 &"
    sleep 1.5
    env $ucx_env timeout 60 ucx_perftest "$PEER_ETH" -p $port "$@" > "$VMOUT/ucx_perftest.$port.log" 2>&1
    awk '/^Final:/ { print; exit }' "$VMOUT/ucx_perftest.$port.log"
}

# shellcheck disable=SC2034   # used by the sourcing scripts
AWK_MEDIAN='
    function median(s,   a, n, i, j, t) {
        n = split(s, a, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }'
