#!/usr/bin/env bash
# Instructions per request of herdsman binaries, counted by callgrind only while wrk drives them:
# repeatable whatever else the machine is doing (valgrind runs the threads one at a time, so this
# counts work, not contention). Usage:
#   bench/scripts/instructions-per-request.sh LABEL=PATH [LABEL=PATH ...]
# WORKERS (default 1) and INTAKE (default: herdsman's own) set those config keys.
# Needs valgrind, wrk and curl; starts its own herdsman-bench backend on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p herdsman-bench >/dev/null 2>&1
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend_port=$(free_port)
target/release/herdsman-bench backend --listen "127.0.0.1:$backend_port" >/dev/null 2>&1 &
printf '| build | requests counted | instructions | instructions per request |\n|---|---:|---:|---:|\n'
for spec in "$@"; do
  label=${spec%%=*}; bin=${spec#*=}; port=$(free_port)
  intake_line=""
  [ -n "${INTAKE:-}" ] && intake_line="intake = \"$INTAKE\""
  cat > "$work/$label.toml" <<EOT
workers = ${WORKERS:-1}
$intake_line
[[listener]]
name = "bench"
bind = "127.0.0.1:$port"
pool = "backend"
[[pool]]
name = "backend"
servers = [{ name = "b1", addr = "127.0.0.1:$backend_port" }]
EOT
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/$label.cg" \
    "$bin" run -c "$work/$label.toml" 2>"$work/$label.log" &
  pid=$!
  for _ in $(seq 150); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.2; done
  wrk -t1 -c10 -d3s "http://127.0.0.1:$port/" >/dev/null          # warm-up, not counted
  callgrind_control -i on "$pid" >/dev/null 2>&1
  out=$(wrk -t1 -c50 -d10s "http://127.0.0.1:$port/")
  callgrind_control -i off "$pid" >/dev/null 2>&1
  kill -INT "$pid"; wait "$pid" || true
  requests=$(echo "$out" | awk '/requests in/ {print $1}')
  instructions=$(awk '/^totals:/ {print $2}' "$work/$label.cg")
  printf '| %s | %d | %d | %d |\n' "$label" "$requests" "$instructions" $((instructions / requests))
done
