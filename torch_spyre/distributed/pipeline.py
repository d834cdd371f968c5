"""A large all_reduce in pieces (docs/distributed.md, "Large all_reduce: in
pieces"): staged, reduced and copied back piece by piece so the copies
overlap gloo's transfer of the other pieces."""

import torch

from .consistency import _Exchange, _failed_ranks, _partly_read, _refuse_mismatch, _unread
from .staging import _stream_failed


# An all_reduce of a tensor this large is staged, reduced and copied back in
# pieces of this size, so the copies to and from the host overlap gloo's
# transfer of the other pieces (and the copy back after the last piece is short).
_PIPELINE_BYTES = 16 * 2**20
_PIECE_BYTES = 16 * 2**20


def _piece_slices(numel, itemsize):
    """The pieces of a pipelined all_reduce (the last one may be shorter)."""
    step = max(_PIECE_BYTES // itemsize, 1)
    return [slice(start, min(start + step, numel)) for start in range(0, numel, step)]


def _stage(host, tensor):
    """Copy (part of) a pipelined all_reduce's input to the host on the current
    stream (the caller's); returns the event that marks it staged."""
    host.copy_(tensor, non_blocking=True)
    staged = torch.spyre.Event()
    staged.record()
    return staged


class _Pieces:
    """The gloo works of a pipelined all_reduce, each with the piece of the
    output it produces: the completion thread copies a piece back as soon as
    its work is done, while gloo still reduces the next ones."""

    def __init__(self, name):
        self.name = name
        # _Exchange: did every rank read all its pieces? (None: unchecked, or
        # a single piece)
        self.fully_read = None
        self.error = None  # this rank's staging failed partway (unchecked)
        self.works = []  # (gloo work, [(output, host)] to copy back once it is done)

    def add(self, work, pairs) -> None:
        self.works.append((work, pairs))

    def partly_read(self):
        """The error if a rank's stream failed after its first piece was read:
        the pieces reduced before were copied back, the last one is not."""
        if self.fully_read is not None:
            failed = _failed_ranks(self.fully_read.rows())
            if failed:
                return RuntimeError(
                    f"spyreccl: {self.name} failed partway ({failed}): the pieces reduced "
                    "before were copied back and the last one was not, so the tensor's "
                    "contents are undefined on every rank"
                )
        return self.error


def stage_pieces(tensor, staging, direct):
    """The pieces of a pipelined all_reduce of `tensor`, each (host piece gloo
    reduces, the event after which it is on the host, [(output, host)] copied
    back once it is reduced); the staging copies are enqueued on the current
    stream (the caller's). `direct`: pieces of the tensor's memory, used in
    `staging`'s window."""
    slices = _piece_slices(tensor.numel(), tensor.element_size())
    if direct:
        view = staging.view(tensor).view(-1)
        called = torch.spyre.Event()
        called.record()
        pieces = [(view[i], called, []) for i in slices]
    elif tensor.is_contiguous():
        host = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
        flat = tensor.view(-1)
        pieces = [(host[i], _stage(host[i], flat[i]), [(flat[i], host[i])]) for i in slices]
    else:
        host = torch.empty(tensor.numel(), dtype=tensor.dtype, pin_memory=True)
        staged = _stage(host.view(tensor.shape), tensor)
        pieces = [(host[i], staged, []) for i in slices]
        pieces[-1][2].append((tensor, host.view(tensor.shape)))
    return pieces


def reduce_pieces(gloo, check, described, caller, pieces, opts, direct, failure=None) -> _Pieces:
    """The progress thread's part of a pipelined all_reduce: compare it
    across ranks, then hand each piece to gloo once it is on the host.

    The comparison is issued before waiting for the first piece, so it
    overlaps the staging. Whether every rank's inputs were read is then
    exchanged twice (only once the ranks agree on the collective, so every
    rank issues the same gloo operations): once the first piece is on the
    host, waited for before any piece is issued (a direct rank's gloo
    writes the tensor itself, so nothing may start if a rank's stream had
    already failed and it read nothing), and once the last one is (issued
    ahead of the last piece, not waited for here but before its copy back:
    a staged stream that failed in between read only part; a direct
    rank's pieces are all ready at once). `failure`: why this rank cannot
    take part though its inputs were read (its comm stream failed); it is
    reported as an unread input is."""
    signature = _Exchange(gloo, described) if check else None
    pieces[0][1].synchronize()
    unread = failure or (_unread(caller) if _stream_failed(caller) else None)
    reductions = _Pieces("allreduce")
    if signature is not None:
        _refuse_mismatch("allreduce", signature.rows())  # before any data
        read = _Exchange(gloo, "" if unread is None else "!" + unread)
        _refuse_mismatch("allreduce", read.rows())  # every rank alike
    elif unread is not None:
        raise RuntimeError(f"spyreccl: allreduce: {unread}")
    last = len(pieces) - 1
    for k, (twin, staged, back) in enumerate(pieces):
        staged.synchronize()
        if k == last and k > 0:
            # A failure since the first piece latched on the stream.
            partly = None
            if not direct and unread is None and _stream_failed(caller):
                partly = _partly_read(caller)
            if signature is not None:
                reductions.fully_read = _Exchange(gloo, "" if partly is None else "!" + partly)
            elif partly is not None:
                reductions.error = RuntimeError(f"spyreccl: allreduce: {partly}")
        # Issued even if a rank failed: every rank issues every piece.
        reductions.add(gloo.allreduce([twin], opts), back)
    return reductions
