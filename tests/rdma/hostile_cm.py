#!/usr/bin/env python3
"""Strangers against the verbs rail's rdma_cm listener (issue 35, part 4:
nothing expensive for a peer before it proved the key), in a VM.

A rov_stream listens with the verbs rail in RAILOVER_VERBS_CM=rdmacm mode.
A stranger (rov_cm_stranger, tests/rdma/cm_stranger.c) sends connect
requests of four kinds, 32 at a time: the setup's format before challenges
(which the listener answered with a QP, a CQ and registered rings, held
until the handshake deadline), requests for a challenge never answered,
challenges answered with a wrong proof, and answers to slots already used
or never issued (a recorded request replayed).  Checked, for each kind:

  - no request is accepted (the listener makes no QP for any of them: the
    QPs rdma shows for the listener's pid stay at none, sampled while the
    requests are in flight, and its pinned memory grows by less than
    PIN_GROWTH_MAX_KIB);
  - a request for a challenge gets one; an old-format request and a wrong
    proof get a plain reject;
  - the listener lives, and a real connector (rdmacm too) then streams and
    finishes.

usage: hostile_cm.py ROV_STREAM ROV_CM_STRANGER
"""
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hostile"))
import res_lib as L  # noqa: E402

KINDS = [("old", 200), ("ask", 200), ("wrong", 100), ("replay", 100)]
PIN_GROWTH_MAX_KIB = 1024


def rdma_res(what):
    """`rdma -j res show WHAT` as a list of dicts ([] when it fails)."""
    try:
        out = subprocess.run(["rdma", "-j", "res", "show", what], capture_output=True,
                             text=True, timeout=30).stdout
        data = json.loads(out or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    return data if isinstance(data, list) else []


def qps_of(pid):
    return sum(1 for q in rdma_res("qp") if q.get("pid") == pid)


def listen_port(pid):
    """The port of pid's rdma_cm listener, or None."""
    for c in rdma_res("cm_id"):
        host, _, port = str(c.get("src-addr", "")).rpartition(":")
        if c.get("pid") == pid and c.get("state") == "LISTEN" and port.isdigit():
            return host, int(port)
    return None


def main():
    stream, stranger = sys.argv[1], sys.argv[2]
    work = tempfile.mkdtemp(prefix="rov_hostile_cm_", dir=os.environ.get("VMOUT"))
    rails = "verbs@%s:%s" % (os.environ.get("RDMA_DEV", "rxe0"), os.environ.get("RDMA_PORT", "1"))
    env = L.stream_env(rails, RAILOVER_CONNECT_TIMEOUT="2s", RAILOVER_VERBS_CM="rdmacm")
    args = ["--count", "300", "--max-size", "65536", "--timeout", "240", "--quiet-status"]
    started = L.start_listener(stream, work, args, env, wait=120)
    if not started:
        return
    lis, addr = started
    where = None
    for _ in range(50):
        where = listen_port(lis.pid)
        if where:
            break
        time.sleep(0.2)
    if not where:
        L.fail("no rdma_cm listener of pid %d in `rdma res show cm_id`:\n%s" %
               (lis.pid, json.dumps(rdma_res("cm_id"))[:2000]))
        return
    pin0, qp0 = L.status_kib(lis.pid, "VmPin"), qps_of(lis.pid)
    L.note("listener pid %d on %s:%d (rdma_cm); VmPin %d KiB, QPs %d" %
           (lis.pid, where[0], where[1], pin0, qp0))

    for kind, n in KINDS:
        out = os.path.join(work, "stranger-%s.log" % kind)
        with open(out, "w") as f:
            p = subprocess.Popen([stranger, where[0], str(where[1]), kind, str(n)],
                                 stdout=f, stderr=subprocess.STDOUT)
            qp_max, pin_max = qp0, pin0
            while p.poll() is None:
                qp_max = max(qp_max, qps_of(lis.pid))
                pin_max = max(pin_max, L.status_kib(lis.pid, "VmPin"))
                time.sleep(0.1)
            rc = p.wait()
        text = open(out).read().strip()
        L.note("%s (rc %d); the listener's QPs at most %d, VmPin at most %d KiB" %
               (text.splitlines()[-1] if text else "(no output)", rc, qp_max, pin_max))
        counts = {}
        for word in (text.splitlines()[-1] if text else "").split()[1:]:
            k, _, v = word.partition("=")
            counts[k] = int(v) if v.isdigit() else -1
        if rc != 0 or counts.get("n") != n:
            L.fail("%s: the stranger did not finish (rc %d):\n%s" % (kind, rc, text[-2000:]))
            continue
        if counts.get("accepted"):
            L.fail("%s: %d of %d strangers' requests were accepted (the listener made a QP "
                   "for a peer that proved nothing)" % (kind, counts["accepted"], n))
        if qp_max > qp0:
            L.fail("%s: the listener held %d QPs while strangers asked (none before)" %
                   (kind, qp_max))
        if pin_max - pin0 > PIN_GROWTH_MAX_KIB:
            L.fail("%s: pinned memory grew by %d KiB (bound %d KiB): registered rings for "
                   "peers that proved nothing" % (kind, pin_max - pin0, PIN_GROWTH_MAX_KIB))
        if kind == "ask" and counts.get("challenge") != n:
            L.fail("ask: %d of %d requests for a challenge got one" % (counts.get("challenge"), n))
        if kind in ("old", "wrong") and counts.get("reject") != n:
            L.fail("%s: %d of %d requests got a plain reject (the rest: %s)" %
                   (kind, counts.get("reject"), n, text))
        if not lis.alive():
            L.fail("the listener died under the %s requests:\n%s" % (kind, lis.text()[-3000:]))
            return
    warned = [ln for ln in lis.text().splitlines() if "rdma_cm connect request from" in ln]
    L.note("listener warnings naming the requester: %d, e.g. %s" %
           (len(warned), warned[0].strip() if warned else "none"))
    if not warned:
        L.fail("the listener rejected strangers without a warning naming them")

    con = L.Proc([stream, "--connect", addr] + args, env, log=os.path.join(work, "connector.log"))
    L.stream_done(lis, con,
                  "a real connector (rdma_cm, challenge and proof) streamed after the strangers")


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("hostile_cm")
