#!/usr/bin/env bash
# Syscalls per request of one herdsman binary, counted by strace -c -f while wrk drives it
# (1 worker, wrk -c50 for 3 s after a 1 s warm-up). Usage:
#   bench/scripts/syscalls-per-request.sh PATH-TO-HERDSMAN
# Needs strace and wrk; starts its own herdsman-bench backend on 127.0.0.1.
set -euo pipefail
bin=$(realpath "$1")
cd "$(dirname "$0")/../.."
source bench/scripts/proxy-setup.sh
port=$(free_port)
write_config "$work/herdsman.toml" "$port"
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
