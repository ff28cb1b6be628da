#!/usr/bin/env bash
# Syscalls per request of one herdsman binary, counted by strace -c -f while wrk drives it
# (1 worker, wrk -c50 for 3 s after a 1 s warm-up). Usage:
#   bench/scripts/syscalls-per-request.sh PATH-TO-HERDSMAN
# Needs strace and wrk; starts its own herdsman-bench backend on 127.0.0.1.
set -euo pipefail
bin=$(realpath "$1")
cd "$(dirname "$0")/../.."
cargo build --release -p herdsman-bench >/dev/null 2>&1
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend_port=$(free_port); port=$(free_port)
target/release/herdsman-bench backend --listen "127.0.0.1:$backend_port" >/dev/null 2>&1 &
cat > "$work/herdsman.toml" <<EOT
workers = 1
[[listener]]
name = "bench"
bind = "127.0.0.1:$port"
pool = "backend"
[[pool]]
name = "backend"
servers = [{ name = "b1", addr = "127.0.0.1:$backend_port" }]
EOT
"$bin" run -c "$work/herdsman.toml" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
wrk -t1 -c50 -d1s "http://127.0.0.1:$port/" >/dev/null
strace -c -f -p "$pid" -o "$work/strace.out" &
strace_pid=$!
sleep 0.5
out=$(wrk -t1 -c50 -d3s "http://127.0.0.1:$port/")
kill -INT "$strace_pid"; wait "$strace_pid" 2>/dev/null || true
requests=$(echo "$out" | awk '/requests in/ {print $1}')
echo "requests: $requests"
awk -v r="$requests" 'NR>2 && $NF!="total" && $4 ~ /^[0-9]+$/ {printf "%-14s %8.3f per request\n", $NF, $4/r}' "$work/strace.out"
