#!/usr/bin/env python3
"""A fake Railover control server, for the control_*.sh hostile tests.

    control_fake_server.py SOCKET UID REQUESTS ANSWER [BUSY]

Binds the Unix socket SOCKET (as the caller, root), then drops to UID (a
number, or '-' to stay) before listen(): SO_PEERCRED reports the listening
process's uid as of listen(), so clients see UID.  Every request line is
appended to the file REQUESTS; each is answered with ANSWER, a Python bytes
literal (so that it can hold escape codes), e.g. "b'process pid=1\\x1b[2J\\nok\\n'".
BUSY: the first BUSY requests (every one if 'all') are answered as a
process with a full client table answers, "error: busy: 16 control clients
already; try again later", instead.
Writes REQUESTS.ready once it listens; serves until killed.
"""
import ast
import os
import socket
import sys

BUSY = b"error: busy: 16 control clients already; try again later\n"


def main():
    path, uid, requests, answer = sys.argv[1:5]
    answer = ast.literal_eval(answer)
    busy = sys.argv[5] if len(sys.argv) > 5 else "0"
    busy = -1 if busy == "all" else int(busy)
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o666)
    # Opened before dropping to UID, which may not write here.
    log = open(requests, "ab", buffering=0)
    ready = open(requests + ".ready", "w")
    if uid != "-":
        os.setgroups([])
        os.setresgid(int(uid), int(uid), int(uid))
        os.setresuid(int(uid), int(uid), int(uid))
    srv.listen(64)
    ready.write("%d\n" % os.getpid())
    ready.close()
    while True:
        conn, _ = srv.accept()
        conn.settimeout(5)
        line = b""
        try:
            while b"\n" not in line:
                b = conn.recv(4096)
                if not b:
                    break
                line += b
            log.write(line.split(b"\n")[0] + b"\n")
            if busy != 0:
                conn.sendall(BUSY)
                busy -= busy > 0
            else:
                conn.sendall(answer)
        except OSError:
            pass
        conn.close()


if __name__ == "__main__":
    main()
