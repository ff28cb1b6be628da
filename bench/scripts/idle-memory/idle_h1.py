# Opens N HTTP/1.1 keep-alive connections one after another, each one GET read whole, then holds them.
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 30
req = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: h1idle/1.0 (a browser-sized user agent string for the table, Mozilla/5.0 X11 Linux x86_64)\r\nAccept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\nAccept-Language: en-GB,en;q=0.5\r\n\r\n"
socks = []
for i in range(n):
    s = socket.create_connection((host, port)); s.sendall(req); s.settimeout(10)
    buf = b""
    while True:
        d = s.recv(65536)
        if not d: print("closed early"); break
        buf += d
        if b"\r\n\r\n" in buf:
            head, _, body = buf.partition(b"\r\n\r\n")
            length = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
            if len(body) >= length: break
    socks.append(s)
print("ready", len(socks), flush=True)
time.sleep(hold)
