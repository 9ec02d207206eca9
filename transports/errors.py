"""Errors raised while bytes move.  Re-exported by ``collectives``."""
from __future__ import annotations


class CollectiveError(RuntimeError):
    """A collective or point-to-point call could not complete.

    ``call`` names the call ("all_reduce", "recv", ...) once the
    communicator knows it; ``ranks`` lists the ranks concerned.
    """

    def __init__(self, message: str, *, call: str | None = None,
                 ranks: list[int] | tuple[int, ...] = ()):
        super().__init__(message)
        self.detail = message
        self.call = call
        self.ranks = list(ranks)

    def __str__(self) -> str:
        return f"{self.call}: {self.detail}" if self.call else self.detail


class CollectiveTimeout(CollectiveError, TimeoutError):
    """A peer did not arrive within the communicator's timeout."""


class PeerFailure(CollectiveError):
    """A peer process died (or its endpoint broke) while we depended on it."""
