#!/usr/bin/env python3
"""Write the seed corpus for fuzz_wire: valid frames, HELLO payloads and
endpoint address blobs in the layout of transport/wire.h.

Usage: make_corpus.py [DIR]   (default: the corpus/ directory next to this file)
The files are checked in; rerun this after a wire format change.
"""
import hashlib
import hmac
import os
import struct
import sys

WIRE_MAGIC = 0x5652
WIRE_VERSION = 5
ADDR_MAGIC = 0x41564F52
(FT_DATA, FT_ACK, FT_HELLO, FT_HELLO_ACK, FT_SWITCH, FT_RESEND, FT_CLOSE, FT_QUIESCE,
 FT_CHALLENGE) = range(1, 10)
HF_SWITCH, HF_REPLY = 1, 2
EP_ID = bytes(range(0x10, 0x20))
KEY = bytes(range(0x40, 0x60))      # an address blob's endpoint key
FUZZ_KEY = b"railover fuzz endpoint key 0123\0"  # fuzz_wire.c's FUZZ_KEY
FUZZ_CHALLENGE = b"railover fuzz c\0"  # fuzz_wire.c's FUZZ_CHALLENGE
MAC_LEN = 32


def frame(ftype, payload=b"", seq=0, ack=0, tag=0):
    hdr = struct.pack("<HBBIQQII", WIRE_MAGIC, WIRE_VERSION, ftype, len(payload), seq, ack, tag, 0)
    assert len(hdr) == 32
    return hdr + payload


def hello(conn_id, peer_conn_id=0, rail=0, addr=b"", max_msg=1 << 20, ctr=0,
          nonce=bytes(range(16))):
    """A HELLO payload with its MAC left zero (wire.h)."""
    return (EP_ID + struct.pack("<QQHHQQ", conn_id, peer_conn_id, rail, len(addr), max_msg, ctr)
            + nonce + struct.pack("<H", 0) + addr + bytes(MAC_LEN))


def sealed_hello_frame(key, payload, tag=0):
    """A HELLO frame whose MAC is key's over FUZZ_CHALLENGE (auth.c:
    rov_auth_hello_mac)."""
    hdr = frame(FT_HELLO, payload, tag=tag)[:32]
    mac = hmac.new(key, b"railover hello\0" + FUZZ_CHALLENGE + hdr + payload[:-MAC_LEN],
                   hashlib.sha256).digest()
    return hdr + payload[:-MAC_LEN] + mac


def addr_blob(rails):
    out = struct.pack("<IBBI", ADDR_MAGIC, WIRE_VERSION, len(rails), 0) + EP_ID + KEY
    for index, kind, addr in rails:
        out += struct.pack("<BB", index, len(kind)) + kind + struct.pack("<H", len(addr)) + addr
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus")
    os.makedirs(out_dir, exist_ok=True)

    tcp_lo = bytes([127, 0, 0, 1]) + struct.pack(">H", 40000)
    tcp_eth = bytes([10, 0, 0, 2]) + struct.pack(">H", 40001)
    gid = bytes([0xFE, 0x80] + [0] * 6 + list(range(8))) + struct.pack("<IIH", 0x1234, 0x11, 1)
    one_rail = addr_blob([(0, b"tcp", tcp_lo)])
    two_rails = addr_blob([(0, b"verbs", gid), (1, b"tcp", tcp_eth)])

    seeds = {
        "frame-data": frame(FT_DATA, b"hello, railover", seq=1, ack=0, tag=42),
        "frame-data-empty": frame(FT_DATA, seq=7, ack=3, tag=0xFFFFFFFF),
        "frame-ack": frame(FT_ACK, ack=1000),
        "frame-hello": frame(FT_HELLO, hello(1, 0, 0, two_rails), tag=HF_REPLY),
        "frame-hello-ack": frame(FT_HELLO_ACK, hello(9, 1, 1), tag=HF_REPLY),
        "frame-switch": frame(FT_SWITCH, ack=17, tag=HF_SWITCH | HF_REPLY),
        "frame-resend": frame(FT_RESEND, ack=5),
        "frame-close": frame(FT_CLOSE, ack=2**64 - 1),
        "frame-quiesce": frame(FT_QUIESCE, struct.pack("<Q", 12), ack=4),
        "frame-challenge": frame(FT_CHALLENGE, bytes(range(0xA0, 0xB0))),
        "stream-data-ack": frame(FT_DATA, b"x" * 40, seq=2, ack=1) + frame(FT_ACK, ack=2),
        "hello-payload": hello(0x0102030405060708, 77, 3, one_rail),
        "frame-hello-authentic": sealed_hello_frame(FUZZ_KEY, hello(5, 3, 0, ctr=9),
                                                    tag=HF_SWITCH | HF_REPLY),
        "addr-one-rail": one_rail,
        "addr-two-rails": two_rails,
    }
    for name, blob in sorted(seeds.items()):
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob)
    print("wrote %d seeds to %s" % (len(seeds), out_dir))


if __name__ == "__main__":
    main()
