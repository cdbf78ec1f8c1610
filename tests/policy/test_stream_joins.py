"""KJ301 is lifted only for side streams the source provably joins back into the current stream."""

from __future__ import annotations

import pytest

from tests.policy.policy_helpers import fired, triton_candidate

LAUNCH = "    add_kernel[(1,)](a, b, out, n, BLOCK=1024)"

UNJOINED = [
    pytest.param("side = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n" + LAUNCH, id="never-joined"),
    pytest.param("side = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\nif n > 0:\n    torch.cuda.current_stream().wait_stream(side)", id="join-under-if"),
    pytest.param("side = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\nside.wait_stream(torch.cuda.current_stream())", id="joined-the-wrong-way"),
    pytest.param("side = torch.cuda.Stream()\nother = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\ntorch.cuda.current_stream().wait_stream(other)", id="joins-another-stream"),
    pytest.param("side = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n    cur = torch.cuda.current_stream()\n"
                 + LAUNCH + "\ncur.wait_stream(side)", id="current-taken-inside-the-side-context"),
    pytest.param("side = torch.cuda.Stream()\nalias = side\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\ntorch.cuda.current_stream().wait_stream(side)", id="aliased"),
    pytest.param("side = torch.cuda.Stream()\nhandle = side.cuda_stream\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\ntorch.cuda.current_stream().wait_stream(side)", id="raw-handle-escapes"),
    pytest.param("side = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\n    if n > 0:\n        return out\ntorch.cuda.current_stream().wait_stream(side)",
                 id="returns-inside-the-block"),
    pytest.param("side = torch.cuda.Stream()\nwith torch.cuda.stream(side):\n" + LAUNCH
                 + "\nreturn out\ntorch.cuda.current_stream().wait_stream(side)", id="returns-before-the-join"),
    pytest.param("s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()\nwith torch.cuda.stream(s1):\n" + LAUNCH
                 + "\ntorch.cuda.current_stream().wait_stream(s1)", id="tuple-assignment"),
]


@pytest.mark.parametrize("forward", UNJOINED)
def test_side_streams_not_provably_joined_keep_kj301(forward):
    assert "KJ301" in fired(triton_candidate(forward))


def test_one_joined_stream_does_not_lift_an_unjoined_one_on_another_line():
    forward = ("good = torch.cuda.Stream()\nbad = torch.cuda.Stream()\n"
               "with torch.cuda.stream(good):\n" + LAUNCH + "\ntorch.cuda.current_stream().wait_stream(good)\n"
               "with torch.cuda.stream(bad):\n" + LAUNCH)
    assert "KJ301" in fired(triton_candidate(forward))


def test_two_joined_streams_are_accepted():
    forward = ("cur = torch.cuda.current_stream()\ns1 = torch.cuda.Stream()\ns2 = torch.cuda.Stream()\n"
               "s1.wait_stream(cur)\ns2.wait_stream(cur)\n"
               "with torch.cuda.stream(s1):\n" + LAUNCH + "\nwith torch.cuda.stream(s2):\n" + LAUNCH
               + "\ncur.wait_stream(s1)\ncur.wait_stream(s2)")
    assert fired(triton_candidate(forward)) == set()
