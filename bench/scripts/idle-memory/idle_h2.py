# Opens N h2c connections one after another, each making one GET with browser-sized fields (indexed into
# the HPACK table) and reading its whole response, then holds them all idle for HOLD seconds.
import socket, struct, sys, time, select
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hold = float(sys.argv[4]) if len(sys.argv) > 4 else 30
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
def frame(t, f, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([t, f]) + struct.pack(">I", sid) + payload
def lit(name, value):  # literal with incremental indexing, new name
    def s(b): return bytes([len(b)]) + b
    return b"\x40" + s(name) + s(value)
block = b"\x82\x86\x84" + lit(b":authority", b"127.0.0.1") + lit(b"user-agent", b"h2idle/1.0 (a browser-sized user agent string for the table, Mozilla/5.0 X11 Linux x86_64)") + lit(b"accept", b"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8") + lit(b"accept-language", b"en-GB,en;q=0.5")
hello = PREFACE + frame(4, 0, 0, b"") + frame(1, 5, 1, block)
socks = []
done = 0
for i in range(n):
    s = socket.create_connection((host, port)); s.sendall(hello); socks.append(s)
    buf = b""; ended = False
    s.settimeout(10)
    while not ended:
        d = s.recv(65536)
        if not d: print("closed early"); break
        buf += d
        while len(buf) >= 9:
            ln = int.from_bytes(buf[:3], "big"); t = buf[3]; f = buf[4]
            if len(buf) < 9 + ln: break
            if t == 4 and not f & 1: s.sendall(frame(4, 1, 0, b""))
            if t in (0, 1) and f & 1: ended = True
            buf = buf[9 + ln:]
    done += 1
print("ready", done, flush=True)
time.sleep(hold)
