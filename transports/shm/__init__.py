"""POSIX shared-memory transport for the ranks of one host.

Its modules, one job each, each importing only those below it:

* ``settings``: what the environment asks for, and ``Settings``;
* ``segment``: the segment (created, mapped by every rank, unlinked at
  once), its layout (every offset by name), and ``Segment``: one rank's
  mapping, with the rank-block words (doorbells, sleeping flags, arrival,
  the note of a failed call) that every part below shares;
* ``messages``: the requests of the slot protocol;
* ``copy``: how a root copies into its exchange buffer (ordinary or streamed);
* ``exchange``: the staged ``exchange()`` through the exchange buffers;
* ``one_copy``: the one-copy path, peers reading a rank's array where it lies;
* ``regions``: communicator-allocated arrays, which every rank maps;
* ``slots``: the endpoint: the slot protocol (channels of slots, sends,
  receives, matching, unexpected messages, progress and waiting), with the
  exchange and the one-copy path of the collective endpoint;
* ``transport``: ``ShmTransport``, which assembles them;
* ``_futex``, ``_cma``, ``_thp``: futex waits, process_vm_readv/writev and
  the huge-page probe, through ctypes.

A message is cut into slot-sized chunks.  The sender copies a chunk into a
free slot and bumps ``head``; the receiver copies (or reduces) it out and
bumps ``tail``.  With several slots per channel the sender fills chunk k+1
while the receiver reduces chunk k.  Each side then rings the other's
doorbell; a rank with nothing to do spins a little, then sleeps on its own
doorbell with a futex, so ranks oversubscribing a core do not starve each
other.  Every header read from the segment is checked against the receiving
buffer before a byte is written: a corrupt or hostile peer gets an error,
not an out-of-bounds write.
"""
from __future__ import annotations

from .._wire import rank0_settings
from .segment import MASK, SHM_DIR, SHM_PREFIX, Layout, Segment, open_segment
from .settings import (SPIN_OWN_CORES, SPIN_SHARED_CORES, Settings, default_spin,
                       ranks_on_this_machine)
from .slots import EAGER, EXTERNAL, MAX_MESSAGE_BYTES, RENDEZVOUS, ShmEndpoint
from .transport import SUPPORTED_MACHINES, ShmTransport, supported

__all__ = ["ShmTransport", "ShmEndpoint", "Segment", "Layout", "Settings", "supported",
           "rank0_settings", "open_segment", "default_spin", "ranks_on_this_machine",
           "SPIN_OWN_CORES", "SPIN_SHARED_CORES", "SHM_DIR", "SHM_PREFIX", "EAGER",
           "RENDEZVOUS", "EXTERNAL", "MASK", "MAX_MESSAGE_BYTES", "SUPPORTED_MACHINES"]
