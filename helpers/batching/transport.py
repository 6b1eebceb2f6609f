"""Messages between the prefill and decode workers over ``torch.distributed`` point-to-point (gloo or NCCL).

A message is a fixed-size int64 header, optionally followed by tensors (a prompt's token ids and its KV cache)
whose shapes the receiver derives from the header. A gloo receive cannot be polled (its ``is_completed()`` only
turns true inside ``wait()``, and a timed-out wait tears the connection down), so each side runs a receiver
thread that blocks on the next message and hands it to the worker's loop through a local queue: the loop polls
that queue without blocking while it computes.

Failures are loud, never silent waits: if the peer process dies, the kernel closes its sockets and the next
send or the pending receive fails at once; if the peer is alive but silent for longer than ``timeout_s``, the
receive times out. Either way the worker gets ``PeerLost`` naming the peer, reports it and exits.
"""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

HEADER_LEN = 8
KV, END, FREED = 1, 2, 3  # message kinds: a prefilled request, no more requests, a request finished (blocks freed)
_HEADER_TAG, _PAYLOAD_TAG = 1, 2

PayloadSpec = Callable[[list[int]], list[tuple[tuple[int, ...], torch.dtype]]]


class PeerLost(RuntimeError):
    """The other worker died, broke the connection, or stayed silent too long."""


class Channel:
    """Point-to-point link to one peer rank.

    ``payload_spec(header)`` gives the (shape, dtype) of the tensors that follow a header of that kind (none by
    default). ``device`` is where tensors travel: cpu for gloo, cuda for NCCL.
    """

    def __init__(self, peer: int, peer_name: str, timeout_s: float, payload_spec: PayloadSpec = lambda header: [],
                 device: torch.device = torch.device("cpu")) -> None:
        self.peer, self.peer_name, self.timeout_s, self.device = peer, peer_name, timeout_s, device
        self._payload_spec = payload_spec
        self._sends: list[tuple[dist.Work, torch.Tensor]] = []  # keep tensors alive until their send completes
        self._inbox: queue.Queue = queue.Queue()
        self._receiver = threading.Thread(target=self._receive_forever, name=f"recv-from-{peer_name}", daemon=True)
        self._receiver.start()

    def _lost(self, err: Exception) -> PeerLost:
        return PeerLost(f"lost the {self.peer_name} worker: {type(err).__name__}: {str(err).splitlines()[0]}")

    def _recv_tensor(self, shape, dtype, tag: int) -> torch.Tensor:
        tensor = torch.empty(shape, dtype=dtype, device=self.device)
        dist.irecv(tensor, src=self.peer, tag=tag).wait(timedelta(seconds=self.timeout_s))
        return tensor

    def _receive_forever(self) -> None:
        try:
            while True:
                header = self._recv_tensor((HEADER_LEN,), torch.long, _HEADER_TAG).tolist()
                payload = [self._recv_tensor(shape, dtype, _PAYLOAD_TAG) for shape, dtype in self._payload_spec(header)]
                self._inbox.put((header, payload))
        except Exception as err:  # the connection broke or timed out: the loop sees it on its next poll
            self._inbox.put(self._lost(err))

    def send(self, header: list[int], *payload: torch.Tensor) -> None:
        if len(header) > HEADER_LEN:
            raise ValueError(f"header has {len(header)} fields, at most {HEADER_LEN}")
        tensors = [torch.tensor(header + [0] * (HEADER_LEN - len(header)), dtype=torch.long, device=self.device)]
        tensors += [t.to(self.device).contiguous() for t in payload]
        try:
            for i, tensor in enumerate(tensors):
                work = dist.isend(tensor, dst=self.peer, tag=_HEADER_TAG if i == 0 else _PAYLOAD_TAG)
                self._sends.append((work, tensor))
        except Exception as err:  # gloo raises at once when the peer's socket is closed
            raise self._lost(err) from err
        if len(self._sends) > 64:
            self.flush()

    def _unpack(self, item):
        if isinstance(item, PeerLost):
            raise item
        return item

    def poll(self, timeout: float = 0.0) -> tuple[list[int], list[torch.Tensor]] | None:
        """The next message (header, payload tensors) if one arrives within ``timeout`` seconds, else None; with
        the default 0, whether one has arrived (never blocks)."""
        try:
            return self._unpack(self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait())
        except queue.Empty:
            return None

    def wait(self, what: str) -> tuple[list[int], list[torch.Tensor]]:
        """Block for the next message; ``what`` names what we wait for, for the error message."""
        try:
            return self._unpack(self._inbox.get(timeout=self.timeout_s + 5))
        except queue.Empty:  # the receiver thread's own timeout should have fired first
            raise PeerLost(f"no message from the {self.peer_name} worker for {self.timeout_s:.0f} s while waiting "
                           f"for {what}") from None

    def flush(self) -> None:
        """Block until every send so far has been delivered."""
        try:
            for work, _ in self._sends:
                work.wait(timedelta(seconds=self.timeout_s))
        except Exception as err:
            raise self._lost(err) from err
        self._sends = []
