"""The cross-rank signature exchange: before moving any data, every rank
says what it is about to run (or "!" and why it cannot take part), so a
mismatch or a failed rank is refused on every rank alike, instead of gloo
aborting the process or waiting for a peer that never comes."""

import torch

# The descriptions ranks compare before each staged collective (bytes, padded).
_SIGNATURE_BYTES = 256


class _Exchange:
    """An all-gather of every rank's short description of a collective (or
    "!" and why it cannot take part), in flight on gloo."""

    def __init__(self, gloo, described):
        raw = described.encode()[:_SIGNATURE_BYTES]
        mine = torch.zeros(_SIGNATURE_BYTES, dtype=torch.uint8)
        if raw:
            mine[: len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        self._every = torch.empty(gloo.size() * _SIGNATURE_BYTES, dtype=torch.uint8)
        self._work = gloo._allgather_base(self._every, mine)

    def rows(self) -> list:
        """Every rank's description, by rank (waits for gloo)."""
        self._work.wait()
        return [
            bytes(row.tolist()).rstrip(b"\0").decode(errors="replace")
            for row in self._every.view(-1, _SIGNATURE_BYTES)
        ]


def _failed_ranks(rows) -> str:
    """The ranks whose row says they could not take part, and why ("" if none)."""
    return "; ".join(f"rank {r}: {row[1:]}" for r, row in enumerate(rows) if row.startswith("!"))


def _refuse_mismatch(name, rows) -> None:
    """Raise, on every rank alike, if a rank could not take part or the
    ranks' descriptions differ."""
    failed = _failed_ranks(rows)
    if failed:
        raise RuntimeError(f"spyreccl: {name} failed before moving any data ({failed})")
    if any(row != rows[0] for row in rows):
        ranks = "; ".join(f"rank {r}: {row}" for r, row in enumerate(rows))
        raise RuntimeError(
            f"spyreccl: {name} does not match across ranks ({ranks}): every rank "
            "must call the same collective with the same dtypes and shapes"
        )


def _unread(stream) -> str:
    """Why a rank cannot take part: its stream failed, the staging copies were dropped."""
    return f"its inputs were never read: stream {stream.stream_id} failed before the collective"


def _window_dropped(stream, why) -> str:
    """Why a rank cannot take part: its communication stream failed before the
    collective's peer access window, which then never opens."""
    return f"its communication stream {stream.stream_id} failed before the collective: {why}"


def _partly_read(stream) -> str:
    """A pipelined all_reduce whose stream failed after its first piece was staged."""
    return (
        f"its inputs were only partly read: stream {stream.stream_id} failed during the "
        "collective"
    )
