#!/usr/bin/env python3
"""RSS per idle keep-alive connection of one running proxy process, in two batches.

Usage: bench/scripts/idle-rss.py PORT COUNT PID

Opens COUNT connections to 127.0.0.1:PORT one after another, each sending one GET and reading
the response head, then holds them all for 3 s and reads the process's VmRSS: (RSS with them −
RSS before) ÷ COUNT. Then a second batch of COUNT on top, to show the cost once the allocator's
high-water mark is reached. The proxy must allow COUNT × 2 connections and keep idle ones open
for longer than the run (herdsman: [timeouts] client_idle = "300s").
"""
import socket
import sys
import time

port, count, pid = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
REQUEST = b"GET / HTTP/1.1\r\nHost: idle.test\r\n\r\n"


def rss_kib():
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def one_request(sock=None):
    sock = sock or socket.create_connection(("127.0.0.1", port))
    sock.sendall(REQUEST)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit("the proxy closed a connection")
        received += chunk
    if not received.startswith(b"HTTP/1.1 200"):
        status = received.split(b"\r\n")[0]
        sys.exit(f"the proxy answered {status!r}, not 200: is its backend up?")
    return sock


for warm in [one_request() for _ in range(200)]:
    warm.close()
time.sleep(2)
before = rss_kib()
first = [one_request() for _ in range(count)]
time.sleep(3)
with_first = rss_kib()
print(f"first batch: {count} idle, RSS {before} -> {with_first} KiB: "
      f"{(with_first - before) * 1024 / count:.0f} bytes per idle connection")
second = [one_request() for _ in range(count)]
time.sleep(3)
with_second = rss_kib()
print(f"second batch: {count} more, RSS {with_first} -> {with_second} KiB: "
      f"{(with_second - with_first) * 1024 / count:.0f} bytes per idle connection")
