"""Payloads in sealed memory files: how tensors and packed folders go from one process to another.

The sender writes a payload once into a memfd and seals it (no write, no resize, no further seal), then
passes its descriptor over the sandbox's descriptor socket (SCM_RIGHTS; the runner's fd KJ_FD_SOCK) just
before the message line that announces it (`payload_bytes`). A receiver takes one descriptor per such line,
checks the seals and the size before it reads a byte, and maps the file private and copy-on-write (or copies
out what it wants): what the sender wrote can no longer change, and nothing the receiver does reaches the
sender's copy. The supervisor
passes descriptors on and never copies a tensor's bytes: a judge writes its input sets once for all its
candidates, and a candidate's outputs reach the judge without passing through anyone else's memory.

Standard library only: the supervisor imports it too.
"""

from __future__ import annotations

import array
import fcntl
import mmap
import os
import socket
from collections.abc import Iterable

# What a payload's memory file must be sealed against before anyone reads it.
SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
# A runner's end of its descriptor socket (beside stdin, stdout, stderr and its reply pipe, KJ_MSG_FD).
FD_SOCKET = 4


class PayloadError(ValueError):
    """A payload's descriptor that is missing, not a sealed memory file, or not of the size announced."""


class SealedBuffer:
    """One payload's sealed memory file (its descriptor, owned: `close` or the object's end closes it)."""

    def __init__(self, fd: int, nbytes: int) -> None:
        self.fd = fd
        self.nbytes = nbytes

    @classmethod
    def create(cls, nbytes: int, pieces: Iterable[tuple[int, memoryview]]) -> SealedBuffer:
        """A new memory file of `nbytes`, each piece's bytes written at its offset (pwrite: twice the rate of
        a populated shared mapping), the rest zeros; then sealed."""
        fd = os.memfd_create("kj-payload", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            for offset, data in pieces:
                if offset + len(data) > nbytes:
                    raise ValueError(f"{len(data)} bytes at {offset} do not fit a payload of {nbytes}")
                done = 0
                while done < len(data):
                    done += os.pwritev(fd, [data[done:]], offset + done)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, nbytes)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> SealedBuffer:
        return cls.create(len(data), [(0, memoryview(data).cast("B"))])

    @classmethod
    def adopt(cls, fd: int, nbytes: int) -> SealedBuffer:
        """A received descriptor, checked: a memory file sealed as SEALS says, of exactly `nbytes` (closed and
        PayloadError otherwise)."""
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
            size = os.fstat(fd).st_size
        except OSError as exc:
            os.close(fd)
            raise PayloadError(f"the payload's descriptor is not a sealed memory file ({exc.strerror})") from None
        if seals & SEALS != SEALS:
            os.close(fd)
            raise PayloadError("the payload's memory file is not sealed against writes and resizing")
        if size != nbytes:
            os.close(fd)
            raise PayloadError(f"the payload's memory file holds {size} bytes, {nbytes} announced")
        return cls(fd, nbytes)

    def map_private(self) -> mmap.mmap:
        """A private, copy-on-write mapping of the file: tensors over it are the receiver's own (its writes
        reach nobody) and the sender can no longer change them (the seals). It stays mapped while a buffer
        over it is alive, after this descriptor is closed too."""
        return mmap.mmap(self.fd, self.nbytes, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def read(self) -> bytes:
        """The whole payload, copied (a packed folder's bytes)."""
        data = bytearray(self.nbytes)
        view, done = memoryview(data), 0
        while done < self.nbytes:
            got = os.preadv(self.fd, [view[done:]], done)
            if got <= 0:
                raise PayloadError("the payload ended early")
            done += got
        return bytes(data)

    def send(self, sock: socket.socket) -> None:
        """Pass the descriptor (the receiver gets its own; this one stays open). Never waits: a receiver that
        does not take its descriptors gets no more (BlockingIOError)."""
        # sendmsg itself: socket.send_fds ignores its flags on the Python versions the sandboxes run.
        sock.sendmsg([b"p"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self.fd]))],
                     socket.MSG_DONTWAIT)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


def receive(sock: socket.socket, nbytes: int) -> SealedBuffer:
    """The descriptor sent before the line just read (it is already there: the sender passes it first),
    checked as SealedBuffer.adopt does."""
    fds = array.array("i")
    try:
        data, ancillary, flags, _ = sock.recvmsg(1, socket.CMSG_SPACE(fds.itemsize),
                                                 socket.MSG_DONTWAIT | socket.MSG_CMSG_CLOEXEC)
    except BlockingIOError:
        raise PayloadError("no descriptor came before the payload's line") from None
    except OSError as exc:
        raise PayloadError(f"the payload's descriptor could not be received ({exc.strerror})") from None
    for level, kind, items in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(items[:len(items) - len(items) % fds.itemsize])
    if flags & socket.MSG_CTRUNC or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise PayloadError("not exactly one descriptor came with the payload" if data else
                           "the descriptor socket was closed")
    return SealedBuffer.adopt(fds[0], nbytes)
