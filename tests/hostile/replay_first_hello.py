#!/usr/bin/env python3
"""A recorded first HELLO opens nothing (issue 35, part 1).

An observer of the wire (here: a packet socket on the loopback interface,
which needs CAP_NET_RAW; the test skips without it) records the first HELLO
that a real connector sends to a listening rov_stream, then opens REPLAYS
new TCP connections to the listener and sends that HELLO again on each,
followed by a DATA frame, as an attacker injecting messages in the real
peer's name would.

Before the listener challenged every channel (wire version 4 and earlier)
each replay was answered with HELLO_ACK and became a new accepted
connection carrying the real peer's connect-time data (20,000 replays took
the listener from 8 to 199 MB).  Checked now: no replay is answered with a
HELLO_ACK, each is closed by the listener, the listener's RSS grows by less
than RSS_GROWTH_MAX_KIB over all of them, the listener accepted exactly one
connection (its --events log), and the real stream completes with every
message right.

usage: replay_first_hello.py ROV_STREAM SOURCE_DIR
"""
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import res_lib as L  # noqa: E402

REPLAYS = 300
WARMUP = 100                # replays before the first RSS reading: the
                            # allocator's caches (AddressSanitizer's larger)
                            # fill once, and are not what a replay keeps
ANSWERED_MAX_SHOWN = 5      # stop replaying once this many were answered
RSS_GROWTH_MAX_KIB = 4 * 1024
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


class Sniffer(threading.Thread):
    """TCP payloads sent to a port on lo, in capture order."""

    def __init__(self):
        super().__init__(daemon=True)
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.segments = []   # (sport, dport, payload)
        self.stop = False
        self.lock = threading.Lock()

    def run(self):
        while not self.stop:
            try:
                pkt, addr = self.sock.recvfrom(262144)
            except socket.timeout:
                continue
            if addr[2] == PACKET_OUTGOING:   # lo shows each packet twice
                continue
            if len(pkt) < 14 + 20 or struct.unpack("!H", pkt[12:14])[0] != 0x0800:
                continue
            ip = pkt[14:]
            ihl = (ip[0] & 0x0F) * 4
            total = struct.unpack("!H", ip[2:4])[0]
            if ip[9] != 6:
                continue
            tcp = ip[ihl:total]
            sport, dport = struct.unpack("!HH", tcp[:4])
            off = (tcp[12] >> 4) * 4
            payload = tcp[off:]
            if payload:
                with self.lock:
                    self.segments.append((sport, dport, payload))

    def first_payload_to(self, port):
        with self.lock:
            for sport, dport, payload in self.segments:
                if dport == port:
                    return sport, payload
        return None, None


def frames(buf):
    """(type, length) of each whole frame in buf."""
    out = []
    while len(buf) >= 32:
        ftype = buf[3]
        plen = struct.unpack("<I", buf[4:8])[0]
        if len(buf) < 32 + plen:
            break
        out.append((ftype, plen))
        buf = buf[32 + plen:]
    return out


def replay(port, hello, data_frame, hello_ack_type):
    """One replay: True if the listener answered it with a HELLO_ACK."""
    s = socket.create_connection(("127.0.0.1", port))
    try:
        s.sendall(hello + data_frame)
    except OSError:
        s.close()
        return False
    got = b""
    s.settimeout(1.0)
    end = time.monotonic() + 1.0
    try:
        while time.monotonic() < end:
            b = s.recv(65536)
            if not b:
                break
            got += b
            if any(t == hello_ack_type for t, _ in frames(got)):
                break
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return any(t == hello_ack_type for t, _ in frames(got))


def main():
    stream, src = sys.argv[1], sys.argv[2]
    try:
        sniffer = Sniffer()
    except PermissionError:
        print("replay_first_hello: SKIP: a packet socket needs CAP_NET_RAW (run as root)")
        sys.exit(77)
    sniffer.start()
    magic, version, data_type = L.wire_consts(src)
    text = open(os.path.join(src, "transport", "wire.h")).read()
    hello_type = int(text.split("ROV_FT_HELLO = ")[1].split(",")[0])
    hello_ack_type = int(text.split("ROV_FT_HELLO_ACK = ")[1].split(",")[0])

    work = tempfile.mkdtemp(prefix="rov_replay_")
    stop = os.path.join(work, "stop")
    events = os.path.join(work, "events.jsonl")
    env = L.stream_env()
    # Under AddressSanitizer, freed memory waits in its quarantine (256 MB by
    # default) and the RSS says nothing of what the listener keeps.
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0"
    args = ["--stop-file", stop, "--max-size", "4096", "--timeout", "60", "--quiet-status"]
    started = L.start_listener(stream, work, ["--events", events] + args, env)
    if not started:
        return
    lis, addr = started
    port = L.listen_ports(lis.pid)[0]
    con = L.Proc([stream, "--connect", addr] + args, env,
                 log=os.path.join(work, "connector.log"))

    end = time.monotonic() + 20
    sport, first = None, None
    while time.monotonic() < end and first is None:
        sport, first = sniffer.first_payload_to(port)
        time.sleep(0.05)
    if first is None or len(first) < 32 or first[3] != hello_type:
        L.fail("no HELLO seen on the wire to port %d within 20 s (first payload: %r)" %
               (port, first[:40] if first else None))
        return
    hello = first[:32 + struct.unpack("<I", first[4:8])[0]]
    L.note("recorded the first HELLO from port %d: %d bytes" % (sport, len(hello)))
    # A DATA frame the attacker would have delivered in the peer's name.
    body = b"injected by a replayed hello"
    data_frame = struct.pack("<HBBIQQII", magic, version, data_type, len(body), 1, 0, 7, 0) + body

    time.sleep(0.3)
    answered = 0
    done = 0
    for _ in range(WARMUP):
        if replay(port, hello, data_frame, hello_ack_type):
            answered += 1
        done += 1
    time.sleep(0.3)
    rss0 = L.rss_kib(lis.pid)
    for _ in range(REPLAYS):
        if replay(port, hello, data_frame, hello_ack_type):
            answered += 1
        done += 1
        if answered >= ANSWERED_MAX_SHOWN:
            break
    time.sleep(0.5)
    rss1 = L.rss_kib(lis.pid)
    L.note("%d replays: %d answered with HELLO_ACK; listener RSS %d -> %d KiB over the last %d" %
           (done, answered, rss0, rss1, done - WARMUP))
    if answered:
        L.fail("%d of %d replayed HELLOs were answered with HELLO_ACK: a recorded HELLO "
               "opens a connection" % (answered, done))
    if rss1 - rss0 > RSS_GROWTH_MAX_KIB:
        L.fail("listener RSS grew by %d KiB over %d replays (bound %d KiB)" %
               (rss1 - rss0, done - WARMUP, RSS_GROWTH_MAX_KIB))

    open(stop, "w").close()
    rc_c, rc_l = con.wait(60), lis.wait(60)
    sniffer.stop = True
    if rc_c != 0 or rc_l != 0:
        L.fail("the real stream did not complete (connector rc %s, listener rc %s)\n"
               "--- listener\n%s\n--- connector\n%s" %
               (rc_c, rc_l, lis.text()[-3000:], con.text()[-3000:]))
    accepted = 0
    with open(events) as f:
        for line in f:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("ev") == "accepted":
                accepted += 1
    L.note("listener accepted %d connection(s)" % accepted)
    if accepted != 1:
        L.fail("the listener accepted %d connections; the one real connector made 1" % accepted)


if __name__ == "__main__":
    try:
        main()
    finally:
        L.Proc.kill_all()
    L.finish("replay_first_hello")
