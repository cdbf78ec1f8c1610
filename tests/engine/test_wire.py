"""Tensors between processes (sealed memory files): what the receiver reads is what was sent, and a tensor it
does not take is never allocated."""

from __future__ import annotations

import json
import os
import socket
import weakref

import pytest
import torch

from sandbox_side.runtime import sealed_payload, wire
from sandbox_side.runtime.messages import RunDone, TritonCacheDone
from sandbox_side.runtime.sealed_payload import SealedBuffer


def _round_trip(value: object, choose=wire.want_all) -> object:
    sealed = wire.seal(value)
    specs = wire.parse_specs(sealed.description)
    tree = wire.unpack_tree(sealed.description, specs)
    choose(tree)
    wanted = {p.index for p in wire.pending(tree) if p.wanted}
    return wire.resolve(tree, wire.read_tensors(sealed.buffer, specs, wanted))


def test_values_with_tensors_of_every_dtype_come_back_equal_and_in_fresh_storage():
    sent = {"trials": [[torch.randn(3, 4), 7, None], (torch.arange(5), "x")],
            "half": torch.randn(6).to(torch.bfloat16), "flags": torch.tensor([True, False]),
            "scalar": torch.tensor(2.5, dtype=torch.float64), "empty": torch.empty(0, 3)}
    got = _round_trip(sent)
    assert torch.equal(got["trials"][0][0], sent["trials"][0][0]) and got["trials"][0][1:] == [7, None]
    assert isinstance(got["trials"][1], tuple) and torch.equal(got["trials"][1][0], sent["trials"][1][0])
    assert torch.equal(got["half"], sent["half"]) and got["half"].dtype == torch.bfloat16
    assert torch.equal(got["flags"], sent["flags"]) and got["scalar"].item() == 2.5
    assert got["empty"].shape == (0, 3)
    assert got["trials"][0][0].data_ptr() != sent["trials"][0][0].data_ptr()


def test_a_tensor_not_taken_is_skipped_unallocated_and_stands_as_a_meta_tensor():
    def take_first_only(tree):
        tree[0].wanted = True

    got = _round_trip([torch.ones(4), torch.zeros(1000, dtype=torch.float64)], take_first_only)
    assert torch.equal(got[0], torch.ones(4))
    assert got[1].is_meta and got[1].shape == (1000,) and got[1].dtype == torch.float64


def test_a_payload_whose_file_does_not_hold_its_description_is_refused_before_any_allocation():
    # 4 TiB announced beside 16 bytes: refused from the sizes alone, nothing read, mapped nor allocated.
    description = {"tree": {"l": [{"t": 0}, {"t": 1}]},
                   "tensors": [{"dtype": "torch.float32", "shape": [1 << 40], "nbytes": 1 << 42},
                               {"dtype": "torch.float32", "shape": [4], "nbytes": 16}]}
    specs = wire.parse_specs(description)
    with pytest.raises(wire.WireError, match="does not match"):
        wire.read_tensors(SealedBuffer.from_bytes(b"\0" * 16), specs, wanted={1})


def test_taken_tensors_are_the_receivers_own_and_the_senders_file_never_changes():
    """Views of a private copy-on-write mapping: aligned for any dtype, writable, and a write reaches nobody
    (the next reader of the same file, e.g. the next candidate of a judge's inputs, reads what was sealed)."""
    sent = [torch.tensor([True, False, True]), torch.arange(5, dtype=torch.float64), torch.randn(2, 3)]
    sealed = wire.seal(sent)
    specs = wire.parse_specs(sealed.description)
    first = wire.read_tensors(sealed.buffer, specs, {0, 1, 2})
    assert all(t.data_ptr() % wire.ALIGN == 0 for t in first)
    first[1].fill_(-1.0)
    second = wire.read_tensors(sealed.buffer, specs, {0, 1, 2})
    assert all(torch.equal(got, original) for got, original in zip(second, sent, strict=True))


def test_a_sealer_that_hands_its_tensors_over_holds_one_copy_at_a_time(monkeypatch):
    """seal_packed lets each tensor go once its bytes are written, before the next is: a judge's input sets are
    never on the host twice (once as tensors, once in the file)."""
    events: list[str] = []
    value = {"trials": [[torch.randn(64, 64)], [torch.randn(64, 64)]], "pool": [(torch.arange(10), 3)]}
    expected = [value["trials"][0][0].clone(), value["trials"][1][0].clone(), value["pool"][0][0].clone()]
    description, tensors = wire.pack(value)
    del value  # the caller keeps no other reference: pack's tensors are the last ones
    for index in range(len(tensors)):
        weakref.finalize(tensors[index], events.append, f"freed {index}")
    real_pwritev = os.pwritev

    def recording_pwritev(fd, buffers, offset):
        events.append("write")
        return real_pwritev(fd, buffers, offset)

    monkeypatch.setattr(sealed_payload.os, "pwritev", recording_pwritev)
    sealed = wire.seal_packed(description, tensors)
    assert tensors == [None, None, None]
    assert events == ["write", "freed 0", "write", "freed 1", "write", "freed 2"]
    got = wire.unseal(sealed)
    assert isinstance(got, dict) and got["pool"][0][1] == 3 and isinstance(got["pool"][0], tuple)
    assert all(torch.equal(a, b) for a, b in zip([got["trials"][0][0], got["trials"][1][0], got["pool"][0][0]],
                                                 expected, strict=True))


def test_the_sealers_own_views_are_private_to_it():
    sealed = wire.seal([torch.zeros(8), torch.ones(3, dtype=torch.int64)])
    mine = wire.unseal(sealed)
    assert isinstance(mine, list)
    mine[0].fill_(5.0)  # e.g. the judge's timing variants written into its own pool
    again = wire.unseal(sealed)
    assert isinstance(again, list) and torch.equal(again[0], torch.zeros(8)) and torch.equal(again[1], torch.ones(3, dtype=torch.int64))


@pytest.mark.parametrize("spec, problem", [
    ({"dtype": "torch.float32", "shape": [4], "nbytes": 8}, "announced 8 bytes"),
    ({"dtype": "torch.float32", "shape": [-1], "nbytes": 4}, "invalid tensor shape"),
    ({"dtype": "object", "shape": [1], "nbytes": 8}, "malformed"),
])
def test_descriptions_that_do_not_add_up_are_refused(spec, problem):
    with pytest.raises(wire.WireError, match=problem):
        wire.parse_specs({"tree": {"t": 0}, "tensors": [spec]})


def test_a_tensor_referenced_twice_is_refused():
    description = {"tree": {"l": [{"t": 0}, {"t": 0}]},
                   "tensors": [{"dtype": "torch.float32", "shape": [1], "nbytes": 4}]}
    with pytest.raises(wire.WireError):
        wire.unpack_tree(description, wire.parse_specs(description))


def test_objects_other_than_plain_data_cannot_be_sent():
    with pytest.raises(wire.WireError, match="cannot be exchanged"):
        wire.pack([object()])


@pytest.fixture
def channel(monkeypatch):
    """A runner's channel, its reply pipe and descriptor socket ends here."""
    from sandbox_side.runtime.channel import Channel

    read_end, write_end = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    monkeypatch.setenv("KJ_MSG_FD", str(write_end))
    monkeypatch.setenv("KJ_FD_SOCK", str(theirs.detach()))
    yield Channel(), read_end, ours
    os.close(read_end)
    ours.close()


@pytest.mark.parametrize("reply", ["tensors", "bytes"])
def test_every_reply_reaches_the_pipe_at_once_with_its_payload_beside_it(channel, reply):
    """A reply sits in no buffer: the supervisor waits for it with nothing else coming after it (a packed
    Triton cache that stayed buffered stalled each GPU job's lane for the 30 s reply limit). Its payload's
    descriptor is there before the line."""
    runner, read_end, ours = channel
    data = b"packed folder bytes"
    if reply == "bytes":
        runner.reply_bytes(TritonCacheDone(files=[]), data)
    else:
        runner.reply(RunDone(), {"out": torch.arange(3)})
    os.set_blocking(read_end, False)
    arrived = os.read(read_end, 1 << 16)  # without the channel closing: what was flushed, or BlockingIOError
    header, _, rest = arrived.partition(b"\n")
    line = json.loads(header)
    assert line["event"] == "done" and rest == b""  # the bytes are not on the pipe
    buffer = sealed_payload.receive(ours, line["payload_bytes"])
    if reply == "bytes":
        assert buffer.read() == data
    else:
        specs = wire.parse_specs(line["payload"])
        assert torch.equal(wire.read_tensors(buffer, specs, {0})[0], torch.arange(3))


def test_a_runner_takes_a_commands_payload_from_its_socket_and_lets_it_go(channel, monkeypatch):
    runner, _, ours = channel
    sealed = wire.seal({"x": torch.ones(3)})
    read_end, write_end = os.pipe()
    os.write(write_end, (json.dumps({"op": "run", "payload": sealed.description,
                                     "payload_bytes": sealed.buffer.nbytes}) + "\n").encode())
    sealed.buffer.send(ours)
    runner._in = os.fdopen(read_end, "rb")
    command = runner.receive()
    from sandbox_side.runtime.messages import Payload

    value = runner.read_payload(Payload(command["payload_bytes"], command["payload"]))
    assert torch.equal(value["x"], torch.ones(3))
    assert runner._received is None  # its descriptor closed once read
    os.close(write_end)
