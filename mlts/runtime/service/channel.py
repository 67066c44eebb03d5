"""The service channel: framed, pickled messages over a Unix SOCK_SEQPACKET socket pair.

File descriptors travel beside the bytes (SCM_RIGHTS), which is how memory pools cross to a driver
service as handles, never as contents. SEQPACKET keeps record boundaries, so a message is one
header record plus continuation records, and file descriptors can never attach to the wrong one.
The byte and descriptor counters let callers (and tests) see what went through the channel.
"""
from __future__ import annotations

import math
import pickle
import socket
import struct
import threading
from typing import Any, Sequence

from ..hal.sync_fence import close_fds

HEADER = struct.Struct("!QI")  # payload bytes, number of file descriptors
RECORD_BYTES = 64 * 1024  # one record must fit in the socket's send buffer
MAX_FDS_PER_RECORD = 250  # below the kernel's SCM_MAX_FD (253)


class ChannelClosed(Exception):
    """The other end closed the channel (it exited, crashed or was closed)."""


class ProtocolError(Exception):
    """A record that is not what the framing promises (truncated, or descriptors lost)."""


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """A connected pair; the caller hands one end to the child process."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


class Channel:
    """One end of a socket pair: `send(obj, fds)` and `recv() -> (obj, fds)`, safe from many threads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self.bytes_sent = 0
        self.bytes_received = 0
        self.fds_sent = 0
        self.fds_received = 0
        self.messages_sent = 0
        self.messages_received = 0

    def stats(self) -> dict[str, int]:
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "fds_sent": self.fds_sent, "fds_received": self.fds_received,
                "messages_sent": self.messages_sent, "messages_received": self.messages_received}

    # -- sending ------------------------------------------------------------------------------
    def send(self, message: Any, fds: Sequence[int] = ()) -> None:
        """Pickle and send; raises ChannelClosed when the peer is gone."""
        self.send_encoded(self.encode(message), fds)

    @staticmethod
    def encode(message: Any) -> bytes:
        return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)

    def send_encoded(self, payload: bytes, fds: Sequence[int] = ()) -> None:
        fds = list(fds)
        data = HEADER.pack(len(payload), len(fds)) + payload
        records = max(1, math.ceil(len(data) / RECORD_BYTES), math.ceil(len(fds) / MAX_FDS_PER_RECORD))
        if records > len(data):
            raise ProtocolError(f"{len(fds)} file descriptors are too many for one message")
        size = math.ceil(len(data) / records)
        view = memoryview(data)
        with self._send_lock:
            try:
                for k in range(records):
                    chunk = view[k * size:(k + 1) * size]
                    part = fds[k * MAX_FDS_PER_RECORD:(k + 1) * MAX_FDS_PER_RECORD]
                    if part:
                        socket.send_fds(self.sock, [chunk], part)
                    else:
                        self.sock.sendmsg([chunk])
            except (BrokenPipeError, ConnectionError) as e:
                raise ChannelClosed(str(e)) from None
            except OSError as e:  # EBADF after close, or the like: the channel is unusable
                raise ChannelClosed(str(e)) from None
            self.bytes_sent += len(data)
            self.fds_sent += len(fds)
            self.messages_sent += 1

    # -- receiving ----------------------------------------------------------------------------
    def recv(self) -> tuple[Any, list[int]]:
        """The next message and its file descriptors (the caller owns and must close them)."""
        with self._recv_lock:
            buf = bytearray()
            fds: list[int] = []
            need = HEADER.size
            nfds = None
            try:
                while True:
                    try:
                        data, got, flags, _ = socket.recv_fds(self.sock, RECORD_BYTES, MAX_FDS_PER_RECORD)
                    except (ConnectionError, OSError) as e:
                        raise ChannelClosed(str(e)) from None
                    fds.extend(got)
                    if not data:
                        raise ChannelClosed("end of channel")
                    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                        raise ProtocolError("a record or its file descriptors were truncated")
                    buf += data
                    if nfds is None and len(buf) >= HEADER.size:
                        length, nfds = HEADER.unpack_from(buf)
                        need = HEADER.size + length
                    if nfds is not None and len(buf) >= need:
                        break
                if len(buf) != need or len(fds) != nfds:
                    raise ProtocolError(f"message framing mismatch ({len(buf)} of {need} bytes, "
                                        f"{len(fds)} of {nfds} descriptors)")
                message = pickle.loads(memoryview(buf)[HEADER.size:])
            except BaseException:
                close_fds(fds)
                raise
            self.bytes_received += len(buf)
            self.fds_received += len(fds)
            self.messages_received += 1
            return message, fds

    def close(self) -> None:
        """Wake up a blocked reader (it sees the end of the channel) and release the socket."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


