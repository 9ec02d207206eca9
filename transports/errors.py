"""Errors raised while bytes move.  Re-exported by ``collectives``.

Two kinds of ``CollectiveError`` have one wording on every transport, so
they are built here: ``mismatched`` (ranks whose calls move different
numbers of bytes) and ``peer_notice`` (another rank of the call detected an
error and said so); ``describe`` puts any error in the words that a notice
or a later error quotes.
"""
from __future__ import annotations

import re


class CollectiveError(RuntimeError):
    """A collective or point-to-point call could not complete.

    ``call`` names the call ("all_reduce", "recv", ...) once the
    communicator knows it; ``ranks`` lists the ranks concerned.  ``relayed``
    is true for an error that another rank detected and told this one about
    (``peer_notice``): this rank does not pass it on.
    """

    relayed = False

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


def describe(e: BaseException) -> str:
    """Error ``e`` in words, without the call a CollectiveError names: its
    detail, else "Type: text", or the type alone where the text is empty (a
    KeyboardInterrupt, say), never "Type: " with nothing after it."""
    if isinstance(e, CollectiveError):
        return e.detail
    text = str(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def mismatched(peer: int, seq: int, theirs: int | None, rank: int, mine: int) -> CollectiveError:
    """Rank ``peer``'s collective #seq moves ``theirs`` bytes (None: a number
    that differs, known only by its hash) where this rank's moves ``mine``."""
    moves = "a different number of bytes" if theirs is None else f"{theirs} bytes"
    return CollectiveError(f"mismatched collectives: rank {peer}'s call #{seq} moves {moves} "
                           f"where rank {rank}'s moves {mine} (shapes, dtypes or counts "
                           "differ between ranks)", ranks=[peer])


def peer_notice(peer: int, text: str) -> CollectiveError:
    """The error of a rank that rank ``peer`` told (``text``: its words, "rank p
    detected an error in <call> #k: ..."): a PeerFailure naming the dead
    ranks where rank ``peer`` found them dead ("... rank(s) [d, ...] died
    during ..."), else a CollectiveError naming ``peer``."""
    dead = _DIED.search(text)
    if dead:
        e: CollectiveError = PeerFailure(text, ranks=[int(r) for r in dead.group(1).split(",")])
    else:
        e = CollectiveError(text, ranks=[peer])
    e.relayed = True
    return e


_DIED = re.compile(r"detected an error in \S+ #\d+: rank\(s\) \[(\d+(?:, \d+)*)\] died during ")
