"""Round-trip row (issue 16): a launch + synchronize from Python, against a
queue.Queue ping-pong between two Python threads, in the same process.

Ours is what every `.item()` or `.cpu()` after a small op pays: switch to a
stream, launch an empty op, synchronize on it (the GIL released while
waiting). The reference is the cheapest cross-thread round trip Python code
has: put a token on a queue that another thread answers on a second queue.
"""

import queue
import threading

import torch

from measure import Row, at_most, interleaved

ROWS = ("python.launch_sync_round_trip",)


def rows(quick, repeats, selected):
    if not selected(ROWS[0]):
        return []
    stream = torch.spyre.Stream()
    requests, replies = queue.Queue(), queue.Queue()

    def echo():
        while requests.get() is not None:
            replies.put(True)

    echoer = threading.Thread(target=echo, daemon=True)
    echoer.start()

    def spyre_round_trip():
        with stream:
            torch.spyre._sleep(0)
        stream.synchronize()

    def queue_ping_pong():
        requests.put(True)
        replies.get()

    namespace = {"spyre_round_trip": spyre_round_trip, "queue_ping_pong": queue_ping_pong}
    try:
        ours, ref = interleaved(
            "spyre_round_trip()", "queue_ping_pong()", namespace, 500 if quick else 20_000, repeats
        )
    finally:
        requests.put(None)
        echoer.join()
    return [Row(ROWS[0], ours, ref, "ns", "queue.Queue ping-pong", at_most(0.5))]
