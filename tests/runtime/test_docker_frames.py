"""Docker's multiplexed exec output, split back into stdout and stderr."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from gpudock.runtime.base import STDERR, STDOUT
from gpudock.runtime.docker.exec import DockerFrames

frames = st.lists(st.tuples(st.sampled_from([1, 2]), st.binary(max_size=300)), max_size=20)


def encode(pieces: list[tuple[int, bytes]]) -> bytes:
    return b"".join(struct.pack(">BxxxL", kind, len(data)) + data for kind, data in pieces)


def joined(pieces: list[tuple[int, bytes]], stream: int) -> bytes:
    return b"".join(data for kind, data in pieces if kind == stream)


@given(frames, st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=50))
def test_any_split_of_the_stream_decodes_to_the_same_output(
    pieces: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    wire = encode(pieces)
    decoder, decoded, position = DockerFrames(), [], 0
    for cut in cuts * (len(wire) // max(1, sum(cuts)) + 1):
        decoded += decoder.feed(wire[position : position + cut])
        position += cut
        if position >= len(wire):
            break
    decoded += decoder.feed(wire[position:])
    for stream, docker_kind in ((STDOUT, 1), (STDERR, 2)):
        assert joined(decoded, stream) == joined(pieces, docker_kind)
    assert all(data for _, data in decoded)  # no empty pieces handed on


def test_payload_is_passed_on_before_its_frame_is_complete() -> None:
    decoder = DockerFrames()
    header = struct.pack(">BxxxL", 2, 10)
    assert decoder.feed(header + b"abc") == [(STDERR, b"abc")]
    assert decoder.feed(b"defghij" + struct.pack(">BxxxL", 1, 2)[:3]) == [(STDERR, b"defghij")]
    assert decoder.feed(struct.pack(">BxxxL", 1, 2)[3:] + b"ok") == [(STDOUT, b"ok")]
