#!/usr/bin/env bash
# The MPI tier's driver (ctest -L mpi): real MPI jobs under
#   mpirun --mca pml ob1 --mca btl self,railover
# with the component loaded from the build tree.  Each scenario checks the
# job's own verdict (rov_mpi_check prints PASSED only when every payload
# matched) and what Open MPI says about railover, so that a job that ran
# on another transport, or a component that did not decline, fails.
#
# Usage: run.sh SCENARIO [ARGS...]
#   job NP RAILS TEST...   NP ranks over RAILS; ob1 must use railover to every peer;
#                          the results (rov_mpi_check's "result:" lines) must equal
#                          those of the same job on Open MPI's own transports
#                          (btl self,vader,tcp)
#   fault TEST...          two loopback rails, rail 0 failing (injected) mid-run:
#                          the job passes and the connection moved to rail 1
#   readfault TEST...      rail 0 reads at most 4 MiB (RAILOVER_MAX_MSG), so each
#                          16 and 64 MiB message is read in parts; its channel
#                          fails as a read completes (RAILOVER_FAULT at=read), at
#                          several points, each a separate job: some parts of a
#                          message arrived, the rest failed; every job passes
#                          and moved to rail 1.  (Open MPI 4.1's ob1 never
#                          completes a send whose gets only partly failed: the
#                          transport reads a message in parts with one
#                          completion, docs/mpi.md.)
#   regfault TEST...       a registration of memory fails (RAILOVER_FAULT
#                          at=register: the 1st, 2nd, 5th of each rank, one job
#                          each, so both a send buffer ob1 offers for a get and
#                          a receive buffer a get lands in): ob1 moves that
#                          message by send, the job passes.  (A NULL handle
#                          sent Open MPI 4.1's ob1 to its put pipeline, and the
#                          sender crashed in the BTL's missing btl_put.)
#   oneconn                4 ranks connecting to each other at once: while they
#                          exchange, `railover status` shows each with exactly
#                          one connection per peer, all established, and its
#                          job and rank
#   force                  `railover force` on a rank mid-job: its connections move
#                          to the second rail (admin.force), the job passes
#   emfile [barrier]       rank 0 out of file descriptors (prlimit) when it first
#                          connects (or, with barrier, when rank 1 connects to
#                          it): the sends wait and the connect is tried again,
#                          the peer is not declared unreachable; with the limit
#                          raised again the job completes
#   params                 RAILOVER_EAGER_LIMIT and btl_railover_rov_eager_limit
#                          give the same result; the MCA parameter wins
#   badparam               bad btl_railover_* values (Railover's settings, the BTL
#                          sizes, an in-process rail) are refused, naming the
#                          parameter and what it accepts; the component declines
#   logs                   Railover's log lines come through Open MPI's output (the
#                          BTL's log hook): warnings always, info lines with
#                          btl_railover_verbose 40 (or btl_base_verbose), debug
#                          ones with debug (80), a subsystem's with RAILOVER_LOG
#   decline                railover not named in the btl selection: it is not
#                          opened, or declines before creating anything
#
# Environment (set by CTest): ROV_MPI_CHECK (the test program), ROV_RAILOVER
# (the railover tool, for oneconn), ROV_BTL_DIR
# (the directory of mca_btl_railover.so), ROV_OMPI_PKGLIBDIR (Open MPI's
# own component directory); optional ROV_MPI_MCA (more mpirun options).
# Exit 0 pass, 1 fail, 77 skipped.
set -u

: "${ROV_MPI_CHECK:?}" "${ROV_BTL_DIR:?}" "${ROV_OMPI_PKGLIBDIR:?}"
if ! command -v mpirun >/dev/null; then
    echo "SKIP: mpirun not found (apt-get install openmpi-bin)"
    exit 77
fi
# The system's components first: the path replaces Open MPI's default.
export OMPI_MCA_mca_base_component_path="$ROV_OMPI_PKGLIBDIR:$ROV_BTL_DIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export RAILOVER_LOG=${RAILOVER_LOG:-warn}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

fail() {
    echo "FAIL: $*"
    echo "---- job output ----"
    cat "$out"
    exit 1
}

# mpirun NP [mpirun options...] -- program args: output in $out, status in $rc.
run_mpi() {
    local np=$1
    shift
    local opts=()
    while [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    shift
    # ROV_MPI_MCA: more mpirun options for a variant of a scenario.
    read -r -a extra <<<"${ROV_MPI_MCA:-}"
    echo "+ mpirun -np $np --mca pml ob1 ${extra[*]} ${opts[*]} $*"
    timeout --kill-after=10 120 mpirun --oversubscribe -np "$np" --mca pml ob1 \
        "${extra[@]}" "${opts[@]}" "$@" >"$out" 2>&1
    rc=$?
}

expect() { grep -q -- "$1" "$out" || fail "expected in the output: $1"; }
refuse() { ! grep -q -- "$1" "$out" || fail "not expected in the output: $1"; }

# ob1 printed one "Using railover btl" line per rank and peer.
expect_railover_everywhere() {
    local np=$1 n
    n=$(grep -c "mca: bml: Using railover btl for send to" "$out")
    [ "$n" -eq $((np * (np - 1))) ] ||
        fail "ob1 chose railover for $n rank/peer pairs, expected $((np * (np - 1)))"
    refuse "mca: bml: Using tcp btl"
}

# A soak job of NP ranks over RAILS in the background ($job), once its
# exchange runs ($pids: the ranks' pids, rank 0 first).
start_soak() {
    local np=$1 rails=$2
    shift 2
    export ROV_MPI_SOAK_S=${ROV_MPI_SOAK_S:-4}
    timeout --kill-after=10 60 mpirun --oversubscribe -np "$np" --mca pml ob1 \
        --mca btl self,railover --mca btl_railover_rails "$rails" "$@" \
        "$ROV_MPI_CHECK" alltoall soak >"$out" 2>&1 &
    job=$!
    for _ in $(seq 300); do
        grep -q "soak: started" "$out" && break
        sleep 0.1
    done
    expect "soak: started"
    sleep 1
    pids=$(for r in $(seq 0 $((np - 1))); do
        sed -n "s/^soak: rank $r pid \\([0-9]*\\)\$/\\1/p" "$out"; done | tr '\n' ' ')
}

scenario=${1:?scenario}
shift
case $scenario in
job)
    np=$1 rails=$2
    shift 2
    run_mpi "$np" --mca btl self,railover --mca btl_base_verbose 100 \
        --mca btl_railover_rails "$rails" -- "$ROV_MPI_CHECK" "$@"
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "PASSED: $np rank(s), 0 failure(s)"
    expect_railover_everywhere "$np"
    results=$(grep '^result: ' "$out")
    [ "$(echo "$results" | grep -c .)" -eq $# ] || fail "not one result line per test"
    run_mpi "$np" --mca btl self,vader,tcp -- "$ROV_MPI_CHECK" "$@"
    [ "$rc" -eq 0 ] || fail "the reference job (btl self,vader,tcp) exited with $rc"
    reference=$(grep '^result: ' "$out")
    [ "$results" = "$reference" ] ||
        fail "results differ from Open MPI's own transports:"$'\n'"railover:"$'\n'"$results"$'\n'"btl self,vader,tcp:"$'\n'"$reference"
    echo "$results (the same on btl self,vader,tcp)"
    ;;
fault)
    # Rail 0 errors after 300 frames on each channel; 0.2 s without
    # progress also counts, so nothing waits for the 1 s default.
    run_mpi 2 --mca btl self,railover --mca btl_base_verbose 10 \
        --mca btl_railover_rails tcp@127.0.0.1,tcp@127.0.0.2 \
        --mca btl_railover_fault rail=0,mode=error,after=100 \
        --mca btl_railover_failover_timeout 200ms -- "$ROV_MPI_CHECK" "$@"
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "PASSED: 2 rank(s), 0 failure(s)"
    expect "moved from tcp@127.0.0.1 to tcp@127.0.0.2"
    ;;
readfault)
    for after in 6 12 20; do
        run_mpi 2 --mca btl self,railover --mca btl_base_verbose 10 \
            --mca btl_railover_rails tcp@127.0.0.1,tcp@127.0.0.2 \
            --mca btl_railover_max_msg 4194304 \
            --mca btl_railover_fault rail=0,mode=error,at=read,after=$after \
            --mca btl_railover_failover_timeout 200ms --mca btl_railover_verbose debug \
            -- "$ROV_MPI_CHECK" "$@"
        [ "$rc" -eq 0 ] || fail "the job with the fault at read $after exited with $rc"
        expect "PASSED: 2 rank(s), 0 failure(s)"
        expect "fails as read $after on the rail completes"
        expect "moved from tcp@127.0.0.1 to tcp@127.0.0.2"
        echo "fault at read $after: passed, $(grep -c 'a read on tcp@127.0.0.1 ended' "$out") read(s) failed"
    done
    ;;
regfault)
    for after in 1 2 5; do
        run_mpi 2 --mca btl self,railover --mca btl_base_verbose 20 \
            --mca btl_railover_rails tcp@127.0.0.1 \
            --mca btl_railover_fault rail=0,mode=error,at=register,after=$after \
            --mca btl_railover_verbose info \
            -- "$ROV_MPI_CHECK" "$@"
        [ "$rc" -eq 0 ] || fail "the job with registration $after failing exited with $rc"
        expect "PASSED: 2 rank(s), 0 failure(s)"
        expect "registration $after on rail 0 fails"
        expect "ob1 moves them by send"
        echo "registration $after failing: passed"
    done
    ;;
oneconn)
    : "${ROV_RAILOVER:?}"
    start_soak 4 tcp@127.0.0.1
    status=$("$ROV_RAILOVER" status $pids 2>&1)
    wait $job
    rc=$?
    echo "$status" >>"$out"
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "PASSED: 4 rank(s), 0 failure(s)"
    [ "$(echo "$status" | grep -c '^process pid=')" -eq 4 ] ||
        fail "railover status did not reach the 4 ranks"
    [ "$(echo "$status" | grep -c ' conns=3$')" -eq 4 ] ||
        fail "a rank does not have exactly one connection per peer"
    [ "$(echo "$status" | grep -c '^conn .* state=established ')" -eq 12 ] ||
        fail "not every connection is established"
    # Each rank's context knows its job (from Open MPI's job id) and rank.
    [ "$(echo "$status" | grep -oE '^process .* jobid=ompi-[0-9a-f]{8} rank=[0-3] ' |
         sed 's/.*rank=//' | sort -u | wc -l)" -eq 4 ] ||
        fail "railover status does not show the job and the ranks 0-3"
    ;;
quiesce)
    # One rank of a running job quiesced, its rails closed and reopened
    # through its control socket (issue 22): its peers' connections quiesce
    # with it, nothing fails, and the job completes with every message
    # verified.  (Its descriptors are not checked: Open MPI's own runtime
    # sockets stay.)
    : "${ROV_RAILOVER:?}"
    ctl=$out.ctl # (mpirun's output file is not opened for appending)
    ROV_MPI_SOAK_S=6 start_soak 4 tcp@127.0.0.1,tcp@127.0.0.2
    p1=$(echo "$pids" | cut -d' ' -f2)
    stage() { "$ROV_RAILOVER" ctl "$p1" stage 2>&1 | sed -n 's/^context stage=\([a-z]*\) .*/\1/p'; }
    wait_stage() {
        for _ in $(seq 200); do [ "$(stage)" = "$1" ] && return 0; sleep 0.05; done
        fail "rank 1 did not reach stage $1 (it is $(stage))"
    }
    "$ROV_RAILOVER" ctl "$p1" quiesce >>"$ctl" 2>&1 || fail "quiesce refused"
    wait_stage quiesced
    "$ROV_RAILOVER" ctl "$p1" close-rails >>"$ctl" 2>&1 || fail "close-rails refused"
    [ "$(stage)" = closed ] || fail "rank 1 is not closed after close-rails"
    sleep 0.5
    "$ROV_RAILOVER" ctl "$p1" reopen >>"$ctl" 2>&1 || fail "reopen refused"
    wait_stage running
    wait $job
    rc=$?
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "PASSED: 4 rank(s), 0 failure(s)"
    cat "$ctl"
    grep -q "context stage=closed" "$ctl" || fail "close-rails did not answer stage=closed"
    rm -f "$ctl"
    ;;
force)
    : "${ROV_RAILOVER:?}"
    start_soak 2 tcp@127.0.0.1,tcp@127.0.0.2 --mca btl_base_verbose 10
    forced=$("$ROV_RAILOVER" force "${pids%% *}" 2>&1)
    wait $job
    rc=$?
    echo "$forced" >>"$out"
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "PASSED: 2 rank(s), 0 failure(s)"
    expect "forced 1 connection"
    expect "moved from tcp@127.0.0.1 to tcp@127.0.0.2 (admin.force)"
    ;;
emfile)
    # Rank 0 holds before its first connection while its descriptors are
    # all taken (prlimit), then goes on.  Without "barrier" it connects
    # first: its BTL gets EMFILE from Railover, says so once and keeps the
    # sends.  With "barrier" rank 1 connects to it first: rank 0's listener
    # closes the connection at once, and rank 1's Railover tries again after
    # a pause instead of failing the connection.  The limit is raised after
    # that was seen: the job must complete, no peer declared unreachable.
    hold=$(mktemp -u)
    timeout --kill-after=10 120 mpirun --oversubscribe -np 2 --mca pml ob1 \
        --mca btl self,railover --mca btl_railover_rails tcp@127.0.0.1 \
        -x ROV_MPI_HOLD_FILE="$hold" ${1:+-x ROV_MPI_HOLD_BARRIER=1} \
        "$ROV_MPI_CHECK" hold ring sizes >"$out" 2>&1 &
    job=$!
    for _ in $(seq 300); do
        grep -q "hold: rank 0 pid" "$out" && break
        sleep 0.1
    done
    pid=$(sed -n 's/^hold: rank 0 pid \([0-9]*\)$/\1/p' "$out")
    [ -n "$pid" ] || { kill $job; fail "rank 0 did not start"; }
    # The lowest free descriptor number becomes the limit: none is left.
    nfd=0
    while [ -e /proc/"$pid"/fd/$nfd ]; do nfd=$((nfd + 1)); done
    prlimit --pid "$pid" --nofile="$nfd": || { kill $job; fail "prlimit failed"; }
    seen="btl railover: cannot connect to \[\[[0-9]*,[0-9]*\],1\] on [^ ]* yet: .*file descriptors"
    if [ -n "${1:-}" ]; then
        # Rank 1 is let go first and connects to rank 0, whose limit is set;
        # rank 0 goes on (and accepts) once the connect waits in one of its
        # listeners' accept queues (or 10 s passed).
        seen="tcp@127.0.0.1: out of file descriptors .*: incoming connections are closed at once"
        touch "$hold.peers"
        for _ in $(seq 100); do
            ss -ltnpH | awk -v p="pid=$pid," 'index($0, p) && $2 > 0 { q = 1 } END { exit !q }' &&
                break
            sleep 0.1
        done
    fi
    touch "$hold"
    for _ in $(seq 100); do
        grep -q -- "$seen" "$out" && break
        sleep 0.1
    done
    sleep 2 # the sends wait, the connects are retried: nothing may fail
    prlimit --pid "$pid" --nofile=1024:
    wait $job
    rc=$?
    rm -f "$hold" "$hold.peers"
    expect "$seen"
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    [ "$(grep -c 'cannot connect to .* yet' "$out")" -le 1 ] || fail "the BTL said it more than once"
    refuse "peer unreachable"
    expect "PASSED: 2 rank(s), 0 failure(s)"
    ;;
params)
    # The BTL's eager limit follows Railover's above 64 KiB, so it shows
    # which value won.
    run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 -- "$ROV_MPI_CHECK" ring
    expect "btl railover: 1 rail(s), first [^;]*; eager limit 65536,"
    RAILOVER_EAGER_LIMIT=96k run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 \
        -- "$ROV_MPI_CHECK" ring
    expect "btl railover: 1 rail(s), first [^;]*; eager limit 98304,"
    run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 \
        --mca btl_railover_rov_eager_limit 96k -- "$ROV_MPI_CHECK" ring
    expect "btl railover: 1 rail(s), first [^;]*; eager limit 98304,"
    RAILOVER_EAGER_LIMIT=96k run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 \
        --mca btl_railover_rov_eager_limit 128k -- "$ROV_MPI_CHECK" ring
    expect "btl railover: 1 rail(s), first [^;]*; eager limit 131072,"
    ;;
badparam)
    # One rank: every rank refuses on its own, and with one rank the job
    # still runs (on btl self) instead of aborting for want of a BTL.
    for setting in "failover_timeout 5parsecs|a time from" \
                   "log loud|error|warn|info|debug|trace" \
                   "window_msgs 0|an integer from 1"; do
        param=${setting%% *} rest=${setting#* } value=${rest%%|*} accepted=${rest#*|}
        run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 \
            --mca "btl_railover_$param" "$value" -- "$ROV_MPI_CHECK" ring
        expect "Parameter:  btl_railover_$param"
        expect "Value:      \"$value\""
        expect "Accepted:   $accepted"
        expect "init of component railover returned failure"
    done
    # RAILOVER_LOG's form, naming the bad part.
    run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 \
        --mca btl_railover_log warn,verb=debug -- "$ROV_MPI_CHECK" ring
    expect "Problem:    RAILOVER_LOG='warn,verb=debug': 'verb' is not a subsystem (auth, "
    expect "init of component railover returned failure"
    # Open MPI's own BTL sizes: "abc" would be read as 0 without a word, and
    # a too small eager limit was named only by ob1's message, which
    # mpirun loses about half the time (issue 35).
    for setting in "eager_limit 0|too small" "eager_limit 1|too small" \
                   "eager_limit abc|not a size" "rndv_eager_limit 12x|not a size" \
                   "max_send_size -5|not a size"; do
        param=${setting%% *} rest=${setting#* } value=${rest%%|*} problem=${rest#*|}
        run_mpi 1 --mca btl self,railover --mca btl_base_verbose 10 \
            --mca "btl_railover_$param" "$value" -- "$ROV_MPI_CHECK" ring
        expect "Parameter:  btl_railover_$param"
        expect "Value:      \"$value\""
        expect "Accepted:   a size in bytes of at least"
        expect "Problem:    .*$problem"
        expect "init of component railover returned failure"
    done
    # A congestion control the kernel lacks: known only when the tcp rail
    # opens, which then fails by name (the component declines).
    run_mpi 1 --mca btl self,railover --mca btl_railover_rails tcp@127.0.0.1 \
        --mca btl_railover_tcp_congestion no-such-cc -- "$ROV_MPI_CHECK" ring
    expect "RAILOVER_TCP_CONGESTION=no-such-cc: the kernel has no such congestion control"
    expect "could not open its rails"
    # The loop rail reaches no other process: refused at once, not after
    # the unreachable timeout as "lost every rail".
    run_mpi 2 --mca btl self,railover --mca btl_railover_rails tcp@127.0.0.1,loop \
        -- "$ROV_MPI_CHECK" ring
    expect "Parameter:  btl_railover_rails"
    expect "Value:      \"tcp@127.0.0.1,loop\""
    expect "Problem:    the loop rail connects contexts of one process only"
    refuse "lost every rail"
    RAILOVER_RAILS=loop run_mpi 2 --mca btl self,railover -x RAILOVER_RAILS \
        -- "$ROV_MPI_CHECK" ring
    expect "Set in:     the environment (RAILOVER_RAILS)"
    refuse "lost every rail"
    ;;
logs)
    # Railover's lines reach the job's output through opal_output (the
    # BTL's log hook), with Open MPI's "[host:pid] " prefix: warnings
    # always (the injected fault's), info lines (the failover's) only
    # from btl_railover_verbose 40 on, or when RAILOVER_LOG asks for them.
    fault_job() {
        run_mpi 2 --mca btl self,railover --mca btl_railover_rails tcp@127.0.0.1,tcp@127.0.0.2 \
            --mca btl_railover_fault rail=0,mode=error,after=100 \
            --mca btl_railover_failover_timeout 200ms "$@" -- "$ROV_MPI_CHECK" ring
        [ "$rc" -eq 0 ] || fail "the job exited with $rc"
        expect "PASSED: 2 rank(s), 0 failure(s)"
    }
    opal='^\[[^]]*:[0-9]*\] \[[0-9]*\.[0-9]\{6\}\] railover'
    info="$opal info conn: conn [0-9]*: rail tcp@127.0.0.1 -> tcp@127.0.0.2 (failover\."
    fault_job
    expect "$opal warn core: fault injection armed"
    refuse "railover info "
    refuse "railover\[[0-9]*\]" # nothing in Railover's own stderr format
    fault_job --mca btl_railover_verbose 40
    expect "$info"
    refuse "railover debug "
    fault_job --mca btl_railover_verbose debug
    expect "$opal debug conn: "
    fault_job --mca btl_base_verbose 40
    expect "$info"
    # RAILOVER_LOG raises a subsystem alone.
    RAILOVER_LOG=warn,conn=info fault_job -x RAILOVER_LOG
    expect "$info"
    refuse "railover info fault: "
    ;;
decline)
    # An include list without railover: Open MPI does not even open it.
    run_mpi 2 --mca btl self,tcp --mca btl_base_verbose 10 -- "$ROV_MPI_CHECK" ring
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "mca: bml: Using tcp btl"
    refuse "component railover"
    # Debian's default selection, an exclusion list (btl = ^uct,openib,ofi),
    # opens every component on the path: railover must decline at init,
    # before it creates a context or listens anywhere.
    run_mpi 2 --mca btl_base_verbose 10 -- "$ROV_MPI_CHECK" ring
    [ "$rc" -eq 0 ] || fail "the job exited with $rc"
    expect "btl railover: not named in the btl selection"
    expect "init of component railover returned failure"
    refuse "mca: bml: Using railover btl"
    refuse "btl railover: [0-9]* rail(s)"
    ;;
*)
    echo "unknown scenario $scenario"
    exit 2
    ;;
esac
echo "PASS: $scenario"
