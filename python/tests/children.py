"""The adapter tests' child processes (multiprocessing, one Pipe each):
answers that say which call failed, and an end that leaves none running."""


def recv_reply(conn, what, timeout=180):
    """The child's next answer; a child that sent ("error", repr) or did
    not answer in time fails the test, naming `what`."""
    if not conn.poll(timeout):
        raise AssertionError(f"{what}: no answer in {timeout} s")
    out = conn.recv()
    if isinstance(out, tuple) and len(out) == 2 and out[0] == "error":
        raise AssertionError(f"{what}: {out[1]}")
    return out


def close_children(conns):
    """Asks each child to close ("close", None) and waits for its answer."""
    for c in conns:
        c.send(("close", None))
        recv_reply(c, "close")


def end_children(procs, timeout=30):
    """Joins every child (killing one still alive after `timeout` s);
    true when all exited 0."""
    for p in procs:
        p.join(timeout=timeout)
        if p.is_alive():
            p.kill()
            p.join()
    return all(p.exitcode == 0 for p in procs)
