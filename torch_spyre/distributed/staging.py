"""What gloo uses in place of a spyre collective's tensors: the device memory
itself, inside a peer access window on the group's communication stream
("direct"), or a pinned host twin filled and copied back in stream order
("staged"); the checks that decide which (docs/distributed.md, "Streams")."""

import os

import torch


def _is_spyre(tensor) -> bool:
    return tensor.device.type == "spyre"


def _any_spyre(args) -> bool:
    for arg in args:
        if isinstance(arg, torch.Tensor):
            if _is_spyre(arg):
                return True
        elif isinstance(arg, (list, tuple)) and _any_spyre(arg):
            return True
    return False


def _describe(tensor) -> str:
    return f"{tensor.dtype} {list(tensor.shape)}"


def _overlapping(tensor):
    """Why the collective cannot write `tensor` (None: it can). Strides do not
    matter otherwise: every spyre tensor is staged through a contiguous host
    twin and copied back element by element (docs/distributed.md, "Strided
    tensors"), but a copy cannot write a tensor whose elements share memory."""
    if torch._debug_has_internal_overlap(tensor) != 1:  # 1: MemOverlap::Yes
        return None
    return (
        f"the result cannot be written into a tensor whose elements overlap in memory "
        f"(shape {list(tensor.shape)}, strides {list(tensor.stride())}): pass one whose "
        "elements are distinct (e.g. .clone() it)"
    )


def _staging_forced() -> bool:
    value = os.environ.get("SPYRECCL_STAGING", "0")
    if value not in ("0", "1"):
        raise ValueError(f"SPYRECCL_STAGING must be 0 or 1, got {value!r}")
    return value == "1"


def _direct(tensor) -> bool:
    """gloo may work on the tensor's device memory in place (in a peer access
    window): it must be dense and contiguous, as gloo's own tensors are."""
    return tensor.is_contiguous() and not (tensor.is_conj() or tensor.is_neg())


class _Staging:
    """What gloo uses in place of one collective's tensors (views of device
    memory used in the collective's window, or host twins), and the copies back."""

    def __init__(self, direct=True):
        self.direct = direct  # in place allowed (SPYRECCL_STAGING unset)
        self.staged = False  # any view or twin: the work is a SpyreCCLWork
        self.spyre = False  # any spyre tensor
        # The collective must wait for the caller's stream: a staging copy was
        # enqueued, or gloo reads or writes device memory directly.
        self.waits_for_caller = False
        self.back = []  # (tensor, host twin) pairs copied back at completion
        self.written = []  # spyre tensors the copies back write (on the comm stream)
        self.problem = None  # why this rank cannot take part (refused on every rank)
        # (tensor, written) that gloo reads, and writes if `written`, in place on the
        # device: the stream sanitizer sees them as the collective's accesses.
        self.in_place = []
        # The peer access window on the comm stream gloo works in on those, or
        # (staged) that says the comm stream did not fail before the collective.
        self.window = None
        self.hold = None  # what synchronize() waits for until the copies back ran

    def view(self, tensor):
        """What gloo uses in place of `tensor` in the collective's window: a CPU
        tensor over the executors' view of its memory, keeping it alive."""
        if self.window is None:
            self.window = torch.spyre._C._PeerAccessWindow()
        return self.window.view(tensor)

    def __call__(self, tensor, *, read=True, write=True, private=False, scratch=False):
        """The tensor gloo should use in place of `tensor`.

        read: the collective reads it (copy the data over, in stream order).
        write: the collective writes it (copy the result back at completion).
        private: use a twin even for a CPU tensor (its data must stay intact).
        scratch: gloo overwrites it though no result is wanted (a spyre
        tensor gets a twin, never a view).
        """
        if not (_is_spyre(tensor) or private):
            return tensor
        if write and _is_spyre(tensor) and self.problem is None:
            self.problem = _overlapping(tensor)
        self.staged = True
        self.spyre = self.spyre or _is_spyre(tensor)
        if self.direct and _is_spyre(tensor) and not (private or scratch) and _direct(tensor):
            # After the caller's stream has run up to the call (WAR and WAW
            # as much as RAW: gloo writes in place).
            self.waits_for_caller = True
            if write:
                self.written.append(tensor)
            self.in_place.append((tensor, write))
            return self.view(tensor)
        # Contiguous whatever the tensor's strides (the copies convert), pinned
        # (so the copies are only enqueued) and allocated per call: gloo
        # writes into it from its own threads.
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=_is_spyre(tensor))
        if read:
            # On the caller's current stream: it reads what was enqueued before.
            host.copy_(tensor, non_blocking=True)
            self.waits_for_caller = self.waits_for_caller or _is_spyre(tensor)
        if write:
            self.back.append((tensor, host))
            if _is_spyre(tensor):
                self.written.append(tensor)
        return host


def _copy_pairs(pairs) -> None:
    """Copy gloo's results into the outputs on the current stream. Pinned
    sources: each copy is only enqueued and keeps its host buffer alive until
    it has run."""
    for tensor, host in pairs:
        tensor.copy_(host, non_blocking=True)


def _stream_failed(stream) -> bool:
    """The stream failed: the work queued on it (staging copies) was dropped."""
    return torch.spyre.stream_get_error(stream) != torch.spyre.SpyreStreamError.Success
