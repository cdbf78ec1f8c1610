"""Tensors over the runners' pipes: what the receiver reads is what was sent, and a tensor it does
not take is skipped without being allocated."""

from __future__ import annotations

import io

import pytest
import torch

from sandbox_side.runtime import wire


def _round_trip(value: object, choose=wire.want_all) -> object:
    description, tensors = wire.pack(value)
    stream = io.BytesIO()
    wire.write_tensors(stream, tensors)
    stream.seek(0)
    specs = wire.parse_specs(description)
    tree = wire.unpack_tree(description, specs)
    choose(tree)
    wanted = {p.index for p in wire.pending(tree) if p.wanted}
    return wire.resolve(tree, wire.read_tensors(stream, specs, wanted))


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


def test_a_huge_announced_tensor_that_is_not_taken_is_never_allocated():
    # 4 TiB announced, 16 bytes sent: skipping reads in bounded chunks and fails on the short
    # stream; allocating it first would have failed with an out-of-memory error instead.
    description = {"tree": {"t": 0}, "tensors": [{"dtype": "torch.float32", "shape": [1 << 40], "nbytes": 1 << 42}]}
    specs = wire.parse_specs(description)
    with pytest.raises(wire.WireError, match="ended early"):
        wire.read_tensors(io.BytesIO(b"\0" * 16), specs, wanted=set())


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


@pytest.mark.parametrize("reply", ["tensors", "bytes"])
def test_every_reply_reaches_the_pipe_at_once(monkeypatch, reply):
    """A reply sits in no buffer: the supervisor waits for it with nothing else coming after it (a packed
    Triton cache that stayed buffered stalled each GPU job's lane for the 30 s reply limit)."""
    import json
    import os

    from sandbox_side.runtime.channel import Channel

    read_end, write_end = os.pipe()
    monkeypatch.setenv("KJ_MSG_FD", str(write_end))
    channel = Channel()
    data = b"packed folder bytes"
    if reply == "bytes":
        channel.send_bytes("done", data, op="triton_cache", files=[])
    else:
        channel.send("done", {"out": torch.arange(3)}, op="run")
    os.set_blocking(read_end, False)
    arrived = os.read(read_end, 1 << 16)  # without the channel closing: what was flushed, or BlockingIOError
    header, _, rest = arrived.partition(b"\n")
    assert json.loads(header)["event"] == "done"
    assert len(rest) == json.loads(header)["payload_bytes"]
    if reply == "bytes":
        assert rest == data
    os.close(read_end)
