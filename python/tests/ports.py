"""A free TCP port on 127.0.0.1 for a test's metadata service (the tests
that spawn processes need its address before any of them starts)."""
import socket


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
