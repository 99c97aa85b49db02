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
  alldown   a single rail, tcp@fab, taken down the same way: no rail is left,
            so the job must end, within a bound (btl_railover_unreachable_timeout
            5s: Railover fails the connection, and Open MPI's abort), with the BTL's message naming the peer
            process and the rails; never hang.

Open MPI's own out-of-band traffic runs on the ethernet link (mpirun in
namespace A, an orted in each namespace entered by a plm_rsh_agent), so the
fault hits Railover, not the launcher.

Exit: 0 pass, 1 fail, 77 skipped (not root, no ip/netns, no mpirun).
"""
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

# The hosts are named by their ethernet addresses (no name lookup, which a
# namespace without a resolver can stall on); the agent maps them to the
# namespaces.
AGENT = """#!/bin/sh
# plm_rsh_agent: "agent HOST CMD..." runs CMD in the namespace of HOST
case $1 in
%s) ns=%s ;;
%s) ns=%s ;;
*) echo "agent: unknown host $1" >&2; exit 1 ;;
esac
shift
exec ip netns exec "$ns" /bin/sh -c "$*"
"""


def mpirun_argv(topo, wd, rails):
    hosts = os.path.join(wd, "hosts")
    with open(hosts, "w") as f:
        f.write("%s slots=1\n%s slots=1\n" % (nf.ETH_A, nf.ETH_B))
    agent = os.path.join(wd, "agent")
    with open(agent, "w") as f:
        f.write(AGENT % (nf.ETH_A, topo.a, nf.ETH_B, topo.b))
    os.chmod(agent, 0o700)
    return topo.exec_argv("A", [
        "mpirun", "--allow-run-as-root", "--hostfile", hosts, "-np", "2",
        "--map-by", "node",
        "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
        "--mca", "oob_tcp_if_include", nf.ETH_NET,
        "--mca", "pml", "ob1", "--mca", "btl", "self,railover",
        "--mca", "btl_base_verbose", "10",
        "--mca", "btl_railover_rails", rails,
        "--mca", "btl_railover_failover_timeout", "250ms",
        "--mca", "btl_railover_keepalive", "100ms",
        "--mca", "btl_railover_unreachable_timeout", UNREACHABLE,
        "--mca", "btl_railover_failback_dwell", DWELL,
        os.environ["ROV_MPI_CHECK"], "soak"])


def wait_for(path, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path) as f:
            if text in f.read():
                return True
        time.sleep(0.1)
    return False


def check_two_hosts(out):
    """The two ranks run in different network namespaces ("hosts")."""
    with open(out) as f:
        pids = re.findall(r"^soak: rank \d+ pid (\d+)$", f.read(), re.M)
    try:
        nets = {os.readlink("/proc/%s/ns/net" % pid) for pid in pids}
    except OSError as e:
        raise nf.Failure("cannot read a rank's network namespace: %s" % e)
    if len(pids) != 2 or len(nets) != 2:
        raise nf.Failure("the ranks (pids %s) are not in two namespaces: %s" % (pids, nets))


def run(scenario):
    for var in ("ROV_MPI_CHECK", "ROV_BTL_DIR", "ROV_OMPI_PKGLIBDIR"):
        if var not in os.environ:
            raise SystemExit("%s is not set (CTest sets it)" % var)
    nf.require_netns(nft=scenario == "nftdrop")
    if not shutil.which("mpirun"):
        raise nf.Skip("mpirun not found (apt-get install openmpi-bin)")
    rails = "tcp@fab" if scenario == "alldown" else "tcp@fab,tcp@eth"
    env = dict(os.environ,
               OMPI_MCA_mca_base_component_path="%s:%s" % (os.environ["ROV_OMPI_PKGLIBDIR"],
                                                           os.environ["ROV_BTL_DIR"]),
               ROV_MPI_SOAK_S=str(SOAK_S), RAILOVER_LOG="warn")
    wd = tempfile.mkdtemp(prefix="rov-mpi-%s-" % scenario)
    out = os.path.join(wd, "job.out")
    ok = False
    try:
        with nf.Topology() as topo:
            argv = mpirun_argv(topo, wd, rails)
            nf.log("$ " + " ".join(argv))
            with open(out, "w") as f:
                job = subprocess.Popen(argv, env=env, stdout=f, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
            try:
                if not wait_for(out, "soak: started", 60):
                    raise nf.Failure("the job did not start its exchange within 60 s")
                check_two_hosts(out)
                time.sleep(FAULT_AFTER_S)
                t_fault = time.monotonic()
                if scenario == "nftdrop":
                    rules = topo.fabric_drop("A", "both")
                    time.sleep(DROP_FOR_S)
                    topo.nft_remove(rules)
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
        if scenario in ("linkdown", "nftdrop"):
            if rc != 0 or "PASSED: 2 rank(s), 0 failure(s)" not in text:
                raise nf.Failure("the job failed (exit %d)" % rc)
            moves = ["moved from tcp@fab to tcp@eth"]
            if scenario == "nftdrop":
                moves.append("moved from tcp@eth to tcp@fab (failback)")
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
            print("job output kept in %s" % out, flush=True)


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else ""
    if scenario not in ("linkdown", "nftdrop", "alldown"):
        raise SystemExit("usage: netns_failover.py linkdown|nftdrop|alldown")
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
