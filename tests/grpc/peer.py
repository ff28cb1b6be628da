"""A real gRPC server and client (Python's grpcio) for tests/grpc.rs, with no generated code:
the methods of `test.Echo` take and return raw bytes.

    python3 peer.py server            prints its port, then serves until killed
    python3 peer.py client ADDRESS    runs every call through ADDRESS, one result line each
"""

import queue
import sys
import time
from concurrent import futures

import grpc

SERVICE = "test.Echo"


def unary(request, context):
    return b"echo:" + request


def server_stream(request, context):
    for i in range(3):
        yield b"part%d:" % i + request
        time.sleep(0.05)


def bidi(requests, context):
    for request in requests:
        yield b"bidi:" + request


def fail(request, context):
    context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")


def slow(request, context):
    time.sleep(2)
    return b"late"


def serve():
    handlers = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "ServerStream": grpc.unary_stream_rpc_method_handler(server_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(bidi),
        "Fail": grpc.unary_unary_rpc_method_handler(fail),
        "Slow": grpc.unary_unary_rpc_method_handler(slow),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()


def outcome(call):
    try:
        return "ok " + repr(call())
    except grpc.RpcError as error:
        return "error %s %s" % (error.code().name, error.details())


def client(address):
    channel = grpc.insecure_channel(address)
    method = lambda kind, name: getattr(channel, kind)("/%s/%s" % (SERVICE, name))
    unary_call = method("unary_unary", "Unary")
    stream_call = method("unary_stream", "ServerStream")
    bidi_call = method("stream_stream", "Bidi")

    def bidi_messages():
        # Each message goes only once the answer to the one before came back: a call whose
        # request was buffered whole before it went on would never finish.
        answered = queue.Queue()

        def requests():
            for message in [b"one", b"two", b"three"]:
                yield message
                answered.get(timeout=5)

        replies = []
        for reply in bidi_call(requests(), timeout=10):
            replies.append(reply)
            answered.put(None)
        return replies

    print("unary", outcome(lambda: unary_call(b"hello", timeout=10)), flush=True)
    print("server-stream", outcome(lambda: list(stream_call(b"x", timeout=10))), flush=True)
    print("bidi", outcome(bidi_messages), flush=True)
    print("error", outcome(lambda: method("unary_unary", "Fail")(b"", timeout=10)), flush=True)
    started = time.monotonic()
    late = outcome(lambda: method("unary_unary", "Slow")(b"", timeout=0.3))
    print("deadline", late, "%.2f" % (time.monotonic() - started), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve()
    else:
        client(sys.argv[2])
