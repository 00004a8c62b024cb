"""Raw TCP stream throughput, the ceiling for braid's TCP transport between two hosts.

  server:  python3 bench/tcp_stream.py serve --port 5201
  client:  python3 bench/tcp_stream.py send --host 10.77.0.2 --port 5201 [--seconds 3]

The client streams 4 MiB writes for --seconds over one connection with the same socket
options braid uses (TCP_NODELAY, 4 MiB buffers); the server counts bytes and prints one JSON
line with GB/s (bytes / 1e9 / seconds between first and last byte).
"""
import argparse
import json
import socket
import time

CHUNK = 4 << 20


def tune(s):
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CHUNK)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CHUNK)


def serve(a):
    with socket.socket() as ls:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((a.bind, a.port))
        ls.listen(1)
        conn, _ = ls.accept()
        with conn:
            tune(conn)
            buf = bytearray(CHUNK)
            view = memoryview(buf)
            total, t0 = 0, None
            while True:
                n = conn.recv_into(view)
                if n == 0:
                    break
                if t0 is None:
                    t0 = time.perf_counter()
                total += n
            dt = time.perf_counter() - t0
            print(json.dumps({"bytes": total, "seconds": round(dt, 3),
                              "GBps": round(total / dt / 1e9, 4)}), flush=True)


def send(a):
    payload = bytes(CHUNK)
    with socket.create_connection((a.host, a.port), timeout=10) as s:
        tune(s)
        end = time.perf_counter() + a.seconds
        while time.perf_counter() < end:
            s.sendall(payload)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["serve", "send"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=5201)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    serve(a) if a.mode == "serve" else send(a)


if __name__ == "__main__":
    main()
