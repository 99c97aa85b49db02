#!/usr/bin/env python3
"""MPI across two "hosts": mpirun launches one rank into each of two network
namespaces joined by a fabric and an ethernet veth pair (tests/failover's
netfault topology), over --mca btl self,railover, and the fabric fails
under the running job.

Scenarios (argument):
  linkdown  rails tcp@fab,tcp@eth; `ip link set fab down` in the middle of a
            checked exchange: the job completes with every payload right,
            and the ranks log the move from tcp@fab to tcp@eth.
  nftdrop   rails tcp@fab,tcp@eth; the fabric silently dropped by nftables
            (both directions, in namespace A) mid-exchange, then let through
            again: the job completes, the ranks log the move to tcp@eth and,
            after the dwell, the failback to tcp@fab.
  force     rails tcp@fab,tcp@eth, nothing fails: `railover force` on rank 0
            mid-exchange moves its connection to tcp@eth (admin.force, both
            ranks log the move), `railover status` shows it there with the
            switch counted, and `railover release` brings it back to tcp@fab;
            the job completes.
  vader     four ranks, two per host, --mca btl self,vader,railover: ob1 uses
            vader between the ranks of a host and railover between hosts; the
            fabric goes down under the exchange (soak), then all-to-all and
            the halo stencil run across both transports, and their results
            equal those of the same job on Open MPI's own transports alone
            (btl self,vader,tcp, one host).
  hostpath  eight ranks, four per host: each rank's connections to the four
            ranks of the other host share one path (the fabric address of
            that host).  The fabric drops for HOSTPATH_DROP_S, long enough
            for the retries' backoff to reach seconds; after the heal every
            connection between the hosts moves back, and the script prints
            how long after the heal each did (RAILOVER_LOG=info): one probe
            on the path brings the others along (failover's path_up()),
            instead of each waiting out its own backoff.
  ccp       four ranks, two per host, btl self,railover, each rank's network
            control endpoint on its host's eth (btl_railover_ccp_addr) and
            the job registry in the test's directory (btl_railover_job_dir):
            mid-exchange, `cprclient list` finds the job under the id derived
            from Open MPI's (ompi-<hex>) with its 4 ranks, and `cprclient`
            (in host A) drains, closes and reopens every rank, each stage
            answered by every rank; the job completes with every payload
            right, and its all-to-all results equal those of the same job on
            Open MPI's own transports (btl self,vader,tcp, one host).
  deadstart four ranks, two per host, rails tcp@fab,tcp@eth: host B drops
            everything arriving on its fabric interface (nftables, `iifname
            "fab" drop`) before the job starts, and DEADSTART_RUNS short jobs
            (all-to-all, non-blocking collectives) run one after the other.
            Ranks connect to each other at once on the first messages; a
            connect on the fabric gives up after the connect timeout and the
            connection comes in on eth, and the rank that loses the race
            hands what it queued on its own connection to the winner
            (rov_conn_hand_over()) or, if its own had connected, closes it
            with its connect timed.  Every job must pass well within
            DEADSTART_BOUND_S: until stop 40 about one job in three hung
            until the kernel's SYN retries ended (127 s).
  bond      four ranks, two per host, rails tcp@fab,tcp@eth with
            btl_railover_bond on (btl_railover_bond_min 4k): every connection
            between the hosts spreads its messages over both links; the
            fabric goes down under the exchange (soak), then all-to-all and
            the halo stencil run, and their results equal those of the same
            job on Open MPI's own transports (btl self,vader,tcp, one host).
  alldown   a single rail, tcp@fab, taken down the same way: no rail is left,
            so the job must end, within a bound (btl_railover_unreachable_timeout
            5s: Railover fails the connection, and Open MPI's abort), with the BTL's message naming the peer
            process and the rails; never hang.

Open MPI's own out-of-band traffic runs on the ethernet link (mpirun in
namespace A, an orted in each namespace entered by a plm_rsh_agent), so the
fault hits Railover, not the launcher.

Exit: 0 pass, 1 fail, 77 skipped (not root, no ip/netns, no mpirun).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # nothing written into the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "failover"))
import netfault as nf  # noqa: E402

SOAK_S = 8            # the exchange runs this long
FAULT_AFTER_S = 2     # the fabric fails this long after the exchange started
DROP_FOR_S = 2        # nftdrop: the fabric drops this long
DWELL = "500ms"       # btl_railover_failback_dwell
JOB_TIMEOUT_S = 90    # a job that is not over by then hangs
UNREACHABLE = "5s"    # btl_railover_unreachable_timeout (RAILOVER_UNREACHABLE_TIMEOUT)
ALLDOWN_BOUND_S = 30  # alldown: from the fault to the end of the job
HOSTPATH_DROP_S = 8   # hostpath: the fabric drops this long; then the
                      # exchange goes on until every connection is back
HOSTPATH_BACK_S = 60  # ... which it must be by then (a hang, not a timing)
DEADSTART_RUNS = 6    # deadstart: jobs run one after the other (one in three hung)
DEADSTART_BOUND_S = 40  # ... each over by then (a hang, not a timing: the bug took 127 s)

# The hosts are named by their ethernet addresses (no name lookup, which a
# namespace without a resolver can stall on); the agent maps them to the
# namespaces.  Each host also gets a host name of its own (a UTS namespace):
# Open MPI names nodes, session directories and vader's shared-memory
# segments by host name, so two "hosts" sharing the machine's name would
# share those files and corrupt each other's shared memory.
AGENT = """#!/bin/sh
# plm_rsh_agent: "agent HOST CMD..." runs CMD in the namespaces of HOST
case $1 in
%s) ns=%s name=rov-hostA ;;
%s) ns=%s name=rov-hostB ;;
*) echo "agent: unknown host $1" >&2; exit 1 ;;
esac
shift
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$name" "$*"
"""


def mpirun_argv(topo, wd, rails, per_host=1, btl="self,railover", tests=("soak",), mca=(),
                verbose=10):
    hosts = os.path.join(wd, "hosts")
    with open(hosts, "w") as f:
        f.write("%s slots=%d\n%s slots=%d\n" % (nf.ETH_A, per_host, nf.ETH_B, per_host))
    agent = os.path.join(wd, "agent")
    with open(agent, "w") as f:
        f.write(AGENT % (nf.ETH_A, topo.a, nf.ETH_B, topo.b))
    os.chmod(agent, 0o700)
    return topo.exec_argv("A", [
        "unshare", "--uts", "/bin/sh", "-c", 'hostname rov-hostA && exec "$@"', "-",
        "mpirun", "--allow-run-as-root", "--hostfile", hosts, "-np", str(2 * per_host),
        "--map-by", "node",
        "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
        "--mca", "oob_tcp_if_include", nf.ETH_NET,
        "--mca", "pml", "ob1", "--mca", "btl", btl,
        "--mca", "btl_base_verbose", str(verbose),
        "--mca", "btl_railover_rails", rails,
        "--mca", "btl_railover_failover_timeout", "250ms",
        "--mca", "btl_railover_keepalive", "100ms",
        "--mca", "btl_railover_unreachable_timeout", UNREACHABLE,
        "--mca", "btl_railover_failback_dwell", DWELL] + list(mca) +
        [os.environ["ROV_MPI_CHECK"]] + list(tests))


def wait_for(path, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            if text in f.read():
                return True
        time.sleep(0.1)
    return False


def rank_pids(out):
    """{rank: pid} from the soak's lines."""
    with open(out) as f:
        return {int(r): int(p) for r, p in re.findall(r"^soak: rank (\d+) pid (\d+)$", f.read(), re.M)}


def check_two_hosts(out, np):
    """Ranks alternate between two network namespaces ("hosts"): even ranks
    on A, odd ranks on B (--map-by node).  Every rank's pid line is waited
    for (10 s): rank 0's "soak: started" can come before the other host's
    ranks' lines, which its orted forwards."""
    deadline = time.monotonic() + 10
    while len(rank_pids(out)) < np and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = rank_pids(out)
    try:
        nets = {r: os.readlink("/proc/%d/ns/net" % pid) for r, pid in pids.items()}
    except OSError as e:
        raise nf.Failure("cannot read a rank's network namespace: %s" % e)
    if sorted(nets) != list(range(np)) or len(set(nets.values())) != 2 or \
            any(nets[r] != nets[r % 2] for r in nets):
        raise nf.Failure("the ranks (pids %s) are not on two hosts by parity: %s" % (pids, nets))


def link_bytes(topo):
    """Bytes host A's fab and eth veths have sent so far."""
    out = nf.sh("ip", "-n", topo.a, "-j", "-s", "link", "show", quiet=True)
    return {l["ifname"]: int(l["stats64"]["tx"]["bytes"]) for l in json.loads(out)
            if l.get("ifname") in ("fab", "eth")}


def check_transports(text):
    """ob1 sends over vader between ranks of one host and over railover
    between hosts: of each rank's three peers, one by vader, two by
    railover."""
    for btl, n in (("vader", 4), ("railover", 8)):
        got = len(re.findall(r"mca: bml: Using %s btl for send to" % btl, text))
        if got != n:
            raise nf.Failure("ob1 chose %s for %d rank/peer pairs, expected %d" % (btl, got, n))
    if "Using tcp btl" in text:
        raise nf.Failure("ob1 used btl tcp")


def railover(*args):
    """The railover tool (tools/railover), from the root namespace: control
    sockets are files, reachable across network namespaces."""
    r = subprocess.run([os.environ["ROV_RAILOVER"]] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=30)
    nf.log("$ railover %s -> %d\n%s" % (" ".join(args), r.returncode, r.stdout.rstrip()))
    if r.returncode != 0:
        raise nf.Failure("railover %s exited %d" % (" ".join(args), r.returncode))
    return r.stdout


def conn_field(status, key):
    """KEY=VALUE of the (only) conn line of a `railover status`."""
    conns = [l for l in status.splitlines() if l.startswith("conn ")]
    if len(conns) != 1:
        raise nf.Failure("expected one connection in the status, found %d" % len(conns))
    m = re.search(r"\b%s=(\S+)" % key, conns[0])
    if not m:
        raise nf.Failure("no %s in the status line %r" % (key, conns[0]))
    return m.group(1)


def force_and_release(pid):
    """Force rank 0's connection off the fabric, check the status, release."""
    if "forced 1 connection" not in railover("force", str(pid)):
        raise nf.Failure("railover force did not force the rank's connection")
    deadline = time.monotonic() + 10
    while True:
        status = railover("status", str(pid))
        if conn_field(status, "rail").startswith("tcp@eth") and conn_field(status, "forced") == "yes":
            break
        if time.monotonic() > deadline:
            raise nf.Failure("the connection is not on tcp@eth 10 s after railover force")
        time.sleep(0.2)
    if int(conn_field(status, "switches")) < 1:
        raise nf.Failure("the forced move is not counted (switches=0)")
    time.sleep(1)  # traffic on the forced rail
    if "released 1 connection" not in railover("release", str(pid)):
        raise nf.Failure("railover release did not release the rank's connection")


def cprclient(topo, env, *words):
    """cprclient in host A: (exit status, output)."""
    argv = topo.exec_argv("A", [os.environ["ROV_CPRCLIENT"]] + list(words))
    t0 = time.monotonic()
    r = subprocess.run(argv, env=dict(env, RAILOVER_LOG="debug"), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=90)
    nf.log("$ cprclient %s -> %d in %.3f s\n%s" % (" ".join(words), r.returncode,
                                                   time.monotonic() - t0, r.stdout.rstrip()))
    return r.returncode, r.stdout


def checkpoint_stages(topo, env, np):
    """ccp: find the job in the registry, then drain, close and reopen it."""
    deadline = time.monotonic() + 20
    while True:
        rc, out = cprclient(topo, env, "list")
        jobs = re.findall(r"^(ompi-[0-9a-f]{8}) ranks=(\d+)\b", out, re.M)
        if rc == 0 and len(jobs) == 1 and int(jobs[0][1]) == np:
            break
        if time.monotonic() > deadline:
            raise nf.Failure("cprclient list does not show one job ompi-<hex> of %d ranks" % np)
        time.sleep(0.2)
    jobid = jobs[0][0]
    for stage, want in (("drain", "quiesced"), ("close", "closed"), ("reopen", "running")):
        rc, out = cprclient(topo, env, "--timeout", "30", jobid, stage)
        ranks = re.findall(r"^rank=(\d+) .* stage=(\S+) time_s=\S+ status=ok$", out, re.M)
        if rc != 0 or sorted(int(r) for r, st in ranks if st == want) != list(range(np)):
            raise nf.Failure("cprclient %s %s: exit %d, expected every rank %s:\n%s" %
                             (jobid, stage, rc, want, out))
        if stage == "close":
            time.sleep(0.5)  # the job's sends wait meanwhile
    nf.log("job %s drained, closed and reopened by cprclient" % jobid)


def reference_results(tests):
    """The "result:" lines of the same tests on Open MPI's own transports,
    four ranks on this host (btl self,vader,tcp over loopback)."""
    argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", "--mca", "pml", "ob1",
            "--mca", "btl", "self,vader,tcp", os.environ["ROV_MPI_CHECK"]] + list(tests)
    nf.log("$ " + " ".join(argv))
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=JOB_TIMEOUT_S)
    if r.returncode != 0:
        raise nf.Failure("the reference job failed (exit %d):\n%s" % (r.returncode, r.stdout))
    return re.findall(r"^result: .*$", r.stdout, re.M)


# Railover's lines reach the job's output through the BTL's log hook:
# "[host:pid] [<s>.<us>] railover info conn: ..." (docs/mpi.md, Logging).
FAILBACK_RE = re.compile(r"^\[[^\]]*:(\d+)\] \[(\d+\.\d+)\] railover info conn: conn (\d+): "
                         r"rail tcp@eth -> tcp@fab \((failback|peer\.failback):", re.M)


def failbacks_after(out, t_heal):
    """hostpath: {(pid, conn): seconds} of each connection side's first move
    back to the fabric after the heal, from the job's output so far."""
    first = {}
    with open(out) as f:
        for pid, t, conn, _why in FAILBACK_RE.findall(f.read()):
            t = float(t) - t_heal
            if t >= 0 and (pid, conn) not in first:
                first[(pid, conn)] = t
    return first


def wait_all_back(out, t_heal, np, stop):
    """hostpath: wait until every one of the np * np / 2 connection sides
    between the hosts (each rank has np / 2 peers on the other one) has
    moved back, then end the exchange (the soak's stop file); the seconds
    after the heal, sorted."""
    want, deadline = np * np // 2, time.monotonic() + HOSTPATH_BACK_S
    while len(failbacks_after(out, t_heal)) < want and time.monotonic() < deadline:
        time.sleep(0.2)
    open(stop, "w").close()
    back = failbacks_after(out, t_heal)
    if len(back) != want:
        raise nf.Failure("%d of %d connection sides moved back to tcp@fab within %d s of the "
                         "heal" % (len(back), want, HOSTPATH_BACK_S))
    return sorted(back.values())


def deadstart(env, wd):
    """deadstart: short jobs started while host B drops all fabric input."""
    np, handed, took = 4, 0, []
    with nf.Topology() as topo:
        topo.nft_add("B", "input", 'iifname "fab" counter drop', "drop all fabric input")
        for i in range(DEADSTART_RUNS):
            out = os.path.join(wd, "job%d.out" % i)
            argv = mpirun_argv(topo, wd, "tcp@fab,tcp@eth", per_host=np // 2,
                               tests=("alltoall", "nonblocking"), verbose=20)
            if i == 0:
                nf.log("$ " + " ".join(argv))
            t0 = time.monotonic()
            with open(out, "w") as f:
                job = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
            try:
                rc = job.wait(timeout=DEADSTART_BOUND_S)
            except subprocess.TimeoutExpired:
                raise nf.Failure("job %d of %d hung: not over %d s after its start (fabric "
                                 "input dropped on host B since before the start); output "
                                 "in %s" % (i + 1, DEADSTART_RUNS, DEADSTART_BOUND_S, out))
            finally:
                if job.poll() is None:
                    job.kill()
                    job.wait()
            took.append(time.monotonic() - t0)
            with open(out) as f:
                text = f.read()
            if rc != 0 or "PASSED: %d rank(s), 0 failure(s)" % np not in text:
                raise nf.Failure("job %d failed (exit %d); output in %s" % (i + 1, rc, out))
            handed += text.count("handed its sends over")
    nf.log("deadstart: %d jobs passed, %.2f-%.2f s each; %d connection(s) lost the race "
           "with their connect under way and handed their sends over" %
           (DEADSTART_RUNS, min(took), max(took), handed))


def run(scenario):
    for var in ("ROV_MPI_CHECK", "ROV_BTL_DIR", "ROV_OMPI_PKGLIBDIR", "ROV_RAILOVER"):
        if var not in os.environ:
            raise SystemExit("%s is not set (CTest sets it)" % var)
    nf.require_netns(nft=scenario in ("nftdrop", "hostpath", "deadstart"))
    if not shutil.which("mpirun"):
        raise nf.Skip("mpirun not found (apt-get install openmpi-bin)")
    rails = "tcp@fab" if scenario == "alldown" else "tcp@fab,tcp@eth"
    vader = scenario == "vader"
    bond = scenario == "bond"
    hostpath = scenario == "hostpath"
    ccp = scenario == "ccp"
    np = 4 if vader or ccp or bond else 8 if hostpath else 2
    tests = ("soak", "alltoall", "halo") if vader or bond else ("alltoall", "soak") if hostpath \
        else ("soak", "alltoall") if ccp else ("soak",)
    if ccp and "ROV_CPRCLIENT" not in os.environ:
        raise SystemExit("ROV_CPRCLIENT is not set (CTest sets it)")
    wd = tempfile.mkdtemp(prefix="rov-mpi-%s-" % scenario)
    out, stop = os.path.join(wd, "job.out"), os.path.join(wd, "soak.stop")
    env = dict(os.environ,
               OMPI_MCA_mca_base_component_path="%s:%s" % (os.environ["ROV_OMPI_PKGLIBDIR"],
                                                           os.environ["ROV_BTL_DIR"]),
               ROV_MPI_SOAK_S=str(JOB_TIMEOUT_S if hostpath else SOAK_S),
               RAILOVER_LOG="info" if hostpath else "warn")
    if hostpath:
        env["ROV_MPI_SOAK_STOP"] = stop
    ok = False
    try:
        if scenario == "deadstart":
            deadstart(env, wd)
            ok = True
            return
        with nf.Topology() as topo:
            jobs = os.path.join(wd, "jobs")
            mca = ("--mca", "btl_railover_job_dir", jobs, "--mca", "btl_railover_ccp_addr",
                   "eth") if ccp else ("--mca", "btl_railover_bond", "on", "--mca",
                                       "btl_railover_bond_min", "4k") if bond else ()
            env["RAILOVER_JOB_DIR"] = jobs  # cprclient's
            argv = mpirun_argv(topo, wd, rails, per_host=np // 2, tests=tests, mca=mca,
                               btl="self,vader,railover" if vader else "self,railover")
            nf.log("$ " + " ".join(argv))
            with open(out, "w") as f:
                job = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
            try:
                if not wait_for(out, "soak: started", 60):
                    raise nf.Failure("the job did not start its exchange within 60 s")
                check_two_hosts(out, np)
                if bond:
                    speeds = {dev: int(nf.sh("ip", "netns", "exec", topo.a, "cat",
                                             "/sys/class/net/%s/speed" % dev, quiet=True))
                              for dev in ("fab", "eth")}
                before = link_bytes(topo)
                time.sleep(FAULT_AFTER_S)
                if bond:
                    after = link_bytes(topo)
                    d = {dev: after[dev] - before[dev] for dev in before}
                    nf.log("bond: host A sent fab %d B, eth %d B before the fault" %
                           (d["fab"], d["eth"]))
                    if d["eth"] < sum(d.values()) / 10 or d["fab"] < sum(d.values()) / 10:
                        status = subprocess.run(
                            [os.environ["ROV_RAILOVER"], "status", str(rank_pids(out)[0])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
                        raise nf.Failure("the bond did not spread the exchange over both "
                                         "links: fab %d B, eth %d B; rank 0:\n%s"
                                         % (d["fab"], d["eth"], status))
                t_fault = time.monotonic()
                if scenario == "force":
                    force_and_release(rank_pids(out)[0])
                elif ccp:
                    checkpoint_stages(topo, env, np)
                elif scenario in ("nftdrop", "hostpath"):
                    rules = topo.fabric_drop("A", "both")
                    time.sleep(HOSTPATH_DROP_S if hostpath else DROP_FOR_S)
                    topo.nft_remove(rules)
                    if hostpath:
                        back = wait_all_back(out, time.time(), np, stop)
                else:
                    topo.link_down("A", "fab")
                rc = job.wait(timeout=JOB_TIMEOUT_S)
                took = time.monotonic() - t_fault
            except subprocess.TimeoutExpired:
                raise nf.Failure("the job hung: not over %d s after the fault" % JOB_TIMEOUT_S)
            finally:
                if job.poll() is None:
                    job.kill()
                    job.wait()
        with open(out) as f:
            text = f.read()
        if scenario != "alldown":
            if rc != 0 or "PASSED: %d rank(s), 0 failure(s)" % np not in text:
                raise nf.Failure("the job failed (exit %d)" % rc)
            moves = [] if ccp else ["moved from tcp@fab to tcp@eth"]
            if hostpath:
                nf.log("hostpath: %d connection sides back on tcp@fab after the heal: first "
                       "%.3f s, median %.3f s, last %.3f s (dwell %s)"
                       % (len(back), back[0], back[len(back) // 2], back[-1], DWELL))
            if scenario in ("nftdrop", "hostpath"):
                moves.append("moved from tcp@eth to tcp@fab (failback)")
            if scenario == "force":
                moves = ["moved from tcp@fab to tcp@eth (admin.force)",
                         "moved from tcp@fab to tcp@eth (peer.admin)",
                         "moved from tcp@eth to tcp@fab (admin.release)",
                         "moved from tcp@eth to tcp@fab (peer.admin)"]
            if vader:
                check_transports(text)
            if vader or ccp or bond:
                results = re.findall(r"^result: .*$", text, re.M)
                reference = reference_results(tests[1:])
                if results != reference:
                    raise nf.Failure("results differ from Open MPI's own transports: %s, "
                                     "btl self,vader,tcp: %s" % (results, reference))
                nf.log("results equal btl self,vader,tcp's: %s" % results)
            if bond:
                # btl_bandwidth is the bond's: both links' speeds summed.
                want = "bandwidth %d Mbit/s" % sum(speeds.values())
                got = re.findall(r"bandwidth \d+ Mbit/s", text)
                if len(got) != np or any(g != want for g in got):
                    raise nf.Failure("btl_bandwidth should be the bond's, %s (fab %d + eth "
                                     "%d), on every rank: %s" % (want, speeds["fab"],
                                                                 speeds["eth"], got))
                nf.log("every rank's btl_bandwidth is the bond's: %s" % want)
            for move in moves:
                if move not in text:
                    raise nf.Failure("no rank logged the %s" % move.replace("moved", "move"))
            nf.log("job passed; %s" % "; ".join(l for l in text.splitlines() if "moved from" in l))
        else:
            if rc == 0:
                raise nf.Failure("the job succeeded with its only rail down")
            if took > ALLDOWN_BOUND_S:
                raise nf.Failure("the job took %.0f s to end after the fault" % took)
            for claim in ("lost every rail to a peer process", "Peer process:",
                          "Rails tried:    tcp@fab", "peer unreachable (no rail has reached",
                          "RAILOVER_UNREACHABLE_TIMEOUT"):
                if claim not in text:
                    raise nf.Failure("the job ended without the BTL's message (%r)" % claim)
            nf.log("job ended %.1f s after the fault, exit %d, with the message" % (took, rc))
        ok = True
    finally:
        if ok:
            shutil.rmtree(wd, ignore_errors=True)
        else:
            print("job output kept in %s" % (wd if scenario == "deadstart" else out), flush=True)


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else ""
    if scenario not in ("linkdown", "nftdrop", "force", "vader", "bond", "ccp", "alldown",
                        "hostpath", "deadstart"):
        raise SystemExit("usage: netns_failover.py "
                         "linkdown|nftdrop|force|vader|bond|ccp|alldown|hostpath|deadstart")
    try:
        run(scenario)
    except nf.Skip as e:
        print("SKIP: %s" % e, flush=True)
        return nf.SKIP
    except nf.Failure as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    finally:
        nf.run_cleanups()
    print("PASS: %s" % scenario, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
