#!/usr/bin/env bash
# Instructions per gRPC unary call of herdsman binaries, counted by callgrind only while h2load
# drives them: repeatable whatever else the machine is doing. Each call comes over h2c (h2load,
# 50 connections x 10 calls in flight, a 25-byte length-prefixed message, content-type
# application/grpc, te: trailers) and goes over h2c to herdsman-bench's own gRPC server (a pool
# with protocol = "h2c"), one worker. Usage:
#   bench/scripts/instructions-per-grpc-call.sh LABEL=PATH [LABEL=PATH ...]
# CALLS (default 20000) calls are counted after 2,000 uncounted ones. KEEP=DIR keeps each build's
# callgrind output as DIR/LABEL.cg, for `callgrind_annotate`.
# Needs valgrind and h2load (nghttp2-client); starts its own gRPC server on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release -p herdsman-bench >/dev/null 2>&1
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

server_port=$(free_port)
target/release/herdsman-bench grpc-server --listen "127.0.0.1:$server_port" >/dev/null 2>&1 &
# The call's message: a gRPC frame (not compressed, 20 bytes) of a protobuf field 1, 23 x's.
python3 -c "
import struct, sys
message = b'\x0a\x17' + b'x' * 23
sys.stdout.buffer.write(b'\x00' + struct.pack('>I', len(message)) + message)" >"$work/call.bin"
calls=${CALLS:-20000}
load() {
  h2load -n "$1" -c 50 -m 10 -d "$work/call.bin" -H 'content-type: application/grpc' \
    -H 'te: trailers' "http://127.0.0.1:$2/bench.Echo/Call" | awk '/status codes/ {print $3}'
}

printf '| build | calls counted | answered 2xx | instructions | instructions per call |\n|---|---:|---:|---:|---:|\n'
for spec in "$@"; do
  label=${spec%%=*}; bin=${spec#*=}; port=$(free_port)
  cat >"$work/$label.toml" <<EOF
workers = 1

[[listener]]
name = "grpc"
bind = "127.0.0.1:$port"
pool = "grpc"
h2c = true

[[pool]]
name = "grpc"
protocol = "h2c"
servers = [{ name = "g1", addr = "127.0.0.1:$server_port" }]
EOF
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/$label.cg" \
    "$bin" run -c "$work/$label.toml" 2>"$work/$label.log" &
  pid=$!
  for _ in $(seq 150); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.2; done
  load 2000 "$port" >/dev/null   # warm-up, not counted
  callgrind_control -i on "$pid" >/dev/null 2>&1
  answered=$(load "$calls" "$port")
  callgrind_control -i off "$pid" >/dev/null 2>&1
  kill -INT "$pid"; wait "$pid" || true
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$work/$label.cg" "$KEEP/$label.cg"; fi
  instructions=$(awk '/^totals:/ {print $2}' "$work/$label.cg")
  printf '| %s | %d | %d | %d | %d |\n' "$label" "$calls" "$answered" "$instructions" $((instructions / calls))
done
