"""Issue 33, item 4: random multi-stream programs against the stream sanitizer.

A seeded generator writes programs over three streams (the default one and two pool streams):
allocations, fills, in-place adds and copies between strided views, out-of-place products,
frees, `_sleep`s, and the `wait_stream` / host synchronize each access needs to be ordered after
the accesses to the same buffer on other streams. Those programs report nothing and equal CPU bit
for bit. Then one synchronization is removed at random; a brute-force happens-before graph of the
program (written here, independently of the sanitizer) says whether that made a race, and at which
operation the first one is launched: the sanitizer must raise there, and nowhere if there is
none. Under the hazard tracker (SPYRE_HAZARD_TRACKER=1) the same racy programs compute CPU's
results."""

import random

import pytest
import torch

import torch_spyre  # noqa: F401
from torch_spyre import _C, sanitizer
from torch_spyre.sanitizer import UnsynchronizedAccessError

STREAMS = 3  # 0 is the default stream
HAZARD_TRACKER = 3  # the sanitizer's ordering mode (SPYRE_HAZARD_TRACKER=1)
SIZE = 32  # elements of an allocated buffer


# ---------------------------------------------------------------- programs

def view_of(rng, buffers, size, length):
    """(buffer, first, step, length) of a buffer with room for `length` elements, or None."""
    roomy = [b for b in buffers if size[b] >= length]
    if not roomy:
        return None
    b = rng.choice(roomy)
    step = rng.choice([1, 2]) if size[b] >= 2 * length - 1 else 1
    first = rng.randrange(size[b] - (length - 1) * step)
    return (b, first, step, length)


def generate(seed, length=24):
    """A correctly synchronized program: a list of operations (tuples)."""
    rng = random.Random(seed)
    ops, size, touched = [], {}, {}
    next_buffer = 0

    def new_buffer(stream, n):
        nonlocal next_buffer
        b = next_buffer
        next_buffer += 1
        size[b], touched[b] = n, {stream}
        return b

    def ordered(stream, *buffers):
        """Waits that order `stream` after every other stream that touched these buffers."""
        for other in sorted(set().union(*(touched[b] for b in buffers)) - {stream}):
            ops.append(("wait", stream, other) if rng.random() < 0.8 else ("sync", other))
        for b in buffers:
            touched[b].add(stream)

    for _ in range(3):
        ops.append(("alloc", 0, new_buffer(0, SIZE), float(len(ops) + 1)))
    while len(ops) < length:
        t = rng.randrange(STREAMS)
        kind = rng.choice(["fill", "add", "copy", "mul", "alloc", "free", "sleep", "sync"])
        live = sorted(size)
        n = rng.choice([4, 8, 16])
        dst = view_of(rng, live, size, n)
        src = None if dst is None else view_of(rng, [b for b in live if b != dst[0]], size, n)
        if kind == "fill" and dst is not None:
            ordered(t, dst[0])
            ops.append(("fill", t, dst, float(len(ops))))
        elif kind in ("add", "copy") and src is not None:
            ordered(t, dst[0], src[0])
            ops.append((kind, t, dst, src))
        elif kind == "mul" and dst is not None:
            ordered(t, dst[0])
            ops.append(("mul", t, dst, new_buffer(t, n)))
        elif kind == "alloc":
            ops.append(("alloc", t, new_buffer(t, SIZE), float(len(ops))))
        elif kind == "free" and len(live) > 3:
            b = rng.choice(live)
            del size[b], touched[b]
            ops.append(("free", b))
        elif kind == "sleep":
            ops.append(("sleep", t))
        elif kind == "sync":
            ops.append(("sync", t))
    return ops


def without_one_sync(ops, seed):
    """The program with one of its waits or host synchronizes removed (seeded)."""
    syncs = [i for i, op in enumerate(ops) if op[0] in ("wait", "sync")]
    if not syncs:
        return ops
    drop = random.Random(seed).choice(syncs)
    return ops[:drop] + ops[drop + 1:]


# ---------------------------------------------------------------- the reference

def elements(view):
    b, first, step, n = view
    return {(b, first + k * step) for k in range(n)}


def whole(b, n):
    return elements((b, 0, 1, n))


def first_race(ops):
    """Index of the first operation launched while racing with an earlier one, or None.

    Happens-before by brute force: every launched operation is a node; its ancestors are its
    stream's previous node, the nodes a wait made its stream wait for, and what the host had
    waited for before the launch."""
    ancestors = []  # per node: set of node indices ordered before it
    accesses = []  # per node: (reads, writes)
    last = [None] * STREAMS  # last node of each stream
    stream_known = [set() for _ in range(STREAMS)]  # ordered before the stream's next node
    host_known = set()  # ordered before every later launch
    size = {}

    def launch(stream, reads, writes):
        before = set(stream_known[stream]) | host_known
        if last[stream] is not None:
            before |= ancestors[last[stream]] | {last[stream]}
        node = len(ancestors)
        ancestors.append(before)
        accesses.append((reads, writes))
        last[stream] = node
        stream_known[stream] = set()
        for earlier in range(node):
            if earlier in before:
                continue
            r, w = accesses[earlier]
            if (writes & (r | w)) or (reads & w):
                return True
        return False

    def upto(stream):
        return set() if last[stream] is None else ancestors[last[stream]] | {last[stream]}

    for index, op in enumerate(ops):
        kind, raced = op[0], False
        if kind == "alloc":
            size[op[2]] = SIZE
            raced = launch(op[1], set(), whole(op[2], SIZE))
        elif kind == "fill":
            raced = launch(op[1], set(), elements(op[2]))
        elif kind in ("add", "copy"):
            raced = launch(op[1], elements(op[3]) | (elements(op[2]) if kind == "add" else set()),
                           elements(op[2]))
        elif kind == "mul":
            size[op[3]] = op[2][3]
            raced = launch(op[1], elements(op[2]), whole(op[3], op[2][3]))
        elif kind == "sleep":
            raced = launch(op[1], set(), set())
        elif kind == "wait":
            stream_known[op[1]] |= upto(op[2])
        elif kind == "sync":
            host_known |= upto(op[1])
        if raced:
            return index
    return None


# ---------------------------------------------------------------- running a program

def select(t, view):
    b, first, step, n = view
    return t[b][first:first + (n - 1) * step + 1:step]


def run(ops, device, streams=None):
    """Runs `ops`; returns (index of the op that raised UnsynchronizedAccessError or None,
    the buffers still alive as lists)."""
    t = {}

    def on(stream):
        return streams[stream] if streams is not None else _NoStream()

    for index, op in enumerate(ops):
        kind = op[0]
        try:
            if kind == "alloc":
                with on(op[1]):
                    t[op[2]] = torch.full((SIZE,), op[3], device=device)
            elif kind == "fill":
                with on(op[1]):
                    select(t, op[2]).fill_(op[3])
            elif kind == "add":
                with on(op[1]):
                    select(t, op[2]).add_(select(t, op[3]))
            elif kind == "copy":
                with on(op[1]):
                    select(t, op[2]).copy_(select(t, op[3]))
            elif kind == "mul":
                with on(op[1]):
                    t[op[3]] = select(t, op[2]) * 2
            elif kind == "free":
                del t[op[1]]
            elif kind == "sleep" and streams is not None:
                with on(op[1]):
                    torch.spyre._sleep(0.2)
            elif kind == "wait" and streams is not None:
                streams[op[1]].wait_stream(streams[op[2]])
            elif kind == "sync" and streams is not None:
                streams[op[1]].synchronize()
        except UnsynchronizedAccessError:
            return index, None
    if streams is not None:
        torch.spyre.synchronize()
    return None, {b: v.cpu().tolist() for b, v in t.items()}


class _NoStream:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def streams():
    """The default stream and two pool streams; the sanitizer's mode is restored after."""
    mode = _C._sanitizer_mode()
    torch.spyre.synchronize()
    yield [torch.spyre.default_stream(), torch.spyre.Stream(), torch.spyre.Stream()]
    _C._sanitizer_set_mode(mode)
    torch.spyre.synchronize()


def check(seeds, streams):
    mismatches, races = [], 0
    for seed in seeds:
        program = generate(seed)
        assert first_race(program) is None, (seed, program)  # the generator's own promise
        sanitizer.enable()
        raised, values = run(program, "spyre", streams)
        sanitizer.disable()
        if raised is not None or values != run(program, "cpu")[1]:
            mismatches.append((seed, "correct program", raised))
        mutated = without_one_sync(program, seed)
        expected = first_race(mutated)
        races += expected is not None
        torch.spyre.synchronize()
        sanitizer.enable()
        raised, _ = run(mutated, "spyre", streams)
        sanitizer.disable()
        torch.spyre.synchronize()
        if raised != expected:
            mismatches.append((seed, "one sync removed", raised, expected))
        # The hazard tracker orders what the sanitizer reports: the racy program computes CPU's.
        _C._sanitizer_set_mode(HAZARD_TRACKER)
        _, values = run(mutated, "spyre", streams)
        sanitizer.disable()
        if values != run(mutated, "cpu")[1]:
            mismatches.append((seed, "hazard tracker", values))
    return mismatches, races


def test_the_reference_finds_the_races_it_should():
    # b0 written on the default stream, read on stream 1: a race without the wait, none with it.
    program = [("alloc", 0, 0, 1.0), ("wait", 1, 0), ("mul", 1, (0, 0, 2, 4), 1)]
    assert first_race(program) is None
    assert first_race(without_one_sync(program, 0)) == 1
    # Two reads never race; disjoint strided views never race.
    assert first_race([("alloc", 0, 0, 1.0), ("sync", 0), ("mul", 1, (0, 16, 1, 4), 1),
                       ("mul", 2, (0, 16, 1, 4), 2), ("fill", 1, (0, 0, 2, 8), 3.0),
                       ("fill", 2, (0, 1, 2, 8), 4.0)]) is None
    assert first_race([("alloc", 0, 0, 1.0), ("sync", 0), ("mul", 2, (0, 0, 1, 4), 1),
                       ("fill", 1, (0, 0, 2, 8), 3.0)]) == 3  # reads 0-3, writes 0, 2, ...
    # A host synchronize orders every later launch; a wait orders one stream.
    assert first_race([("alloc", 0, 0, 1.0), ("sync", 0), ("fill", 1, (0, 0, 1, 4), 2.0),
                       ("wait", 2, 1), ("fill", 2, (0, 0, 1, 4), 3.0),
                       ("fill", 0, (0, 0, 1, 4), 4.0)]) == 5


def test_forty_seeds(streams):
    mismatches, races = check(range(40), streams)
    assert mismatches == []
    assert races >= 10  # the removals made races often enough for the test to mean something


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_four_hundred_seeds(streams):
    mismatches, races = check(range(40, 440), streams)
    assert mismatches == []
    assert races >= 100
