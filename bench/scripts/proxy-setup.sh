# Sourced by the per-request measuring scripts (instructions-per-request.sh,
# syscalls-per-request.sh): builds herdsman-bench, makes a scratch directory that is removed on
# exit with every background job, starts the backend on a free port, and writes herdsman configs
# in front of it. Run from the workspace root.

cargo build --release -p herdsman-bench >/dev/null 2>&1
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

backend_port=$(free_port)
# With SERVERS, the backend answers on every loopback address, one server each.
backend_host=127.0.0.1; [ -n "${SERVERS:-}" ] && backend_host=0.0.0.0
target/release/herdsman-bench backend --listen "$backend_host:$backend_port" >/dev/null 2>&1 &

# With TLS=1 the listener speaks HTTPS (an ECDSA P-256 certificate made here with openssl), and
# `$scheme` is what clients use.
scheme=http
if [ -n "${TLS:-}" ]; then
  scheme=https
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj /CN=bench.test -addext subjectAltName=DNS:bench.test,IP:127.0.0.1 \
    -keyout "$work/key.pem" -out "$work/chain.pem" >/dev/null 2>&1
fi

# write_config FILE PORT: one listener on PORT in front of the backend. WORKERS (default 1) and
# INTAKE (default: herdsman's own) set those keys; TLS=1 adds its [listener.tls] (above); ACCESS_LOG (combined or json) gives the
# listener an access log in that format, written beside FILE. SERVERS=N makes the pool N servers,
# each at a loopback address of its own (127.0.1.1, 127.0.1.2, … as herdsman-bench scale does),
# kept idle for 300 s between requests, balanced by BALANCE (default round-robin).
write_config() {
  local intake_line="" log_lines="" servers timeouts=""
  [ -n "${INTAKE:-}" ] && intake_line="intake = \"$INTAKE\""
  [ -n "${ACCESS_LOG:-}" ] && log_lines="access_log = \"$1.access.log\"
access_log_format = \"$ACCESS_LOG\""
  if [ -n "${SERVERS:-}" ]; then
    servers=$(awk -v n="$SERVERS" -v port="$backend_port" 'BEGIN { for (i = 0; i < n; i++)
      printf "  { name = \"s%d\", addr = \"127.0.%d.%d:%d\" },\n", i, 1 + int(i / 250), 1 + i % 250, port }')
    timeouts=$'[timeouts]\nbackend_idle = "300s"'
  else
    servers="  { name = \"b1\", addr = \"127.0.0.1:$backend_port\" },"
  fi
  cat > "$1" <<EOT
workers = ${WORKERS:-1}
$intake_line
$timeouts
[[listener]]
name = "bench"
bind = "127.0.0.1:$2"
pool = "backend"
$log_lines
$( [ -n "${TLS:-}" ] && printf '[listener.tls]\ncertificates = [{ chain = "%s", key = "%s" }]\n' "$work/chain.pem" "$work/key.pem" )
[[pool]]
name = "backend"
balance = "${BALANCE:-round-robin}"
servers = [
$servers
]
EOT
}
