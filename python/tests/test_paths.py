"""What needs no checkpoint: dotted paths as the C++ side writes them (tree/path.hpp)
and the commit marker's text."""

import pytest

import ckpt
from ckpt._format import decode_commit, dotted, parse_dotted


@pytest.mark.parametrize("segments, text", [
    (("params", "encoder", "kernel"), "params.encoder.kernel"),
    (("layers", "0", "w"), "layers.0.w"),
    (("a.b", "c"), "a\\.b.c"),
    (("back\\slash",), "back\\\\slash"),
    (("nul\0",), "nul\\0"),
    (("",), ""),
])
def test_dotted_paths_escape_as_the_cpp_side_does(segments, text):
    assert dotted(segments) == text
    if segments != ("",):  # "" is the root
        assert parse_dotted(text) == segments


def test_bad_escapes():
    with pytest.raises(ValueError):
        parse_dotted("a\\x")
    with pytest.raises(ValueError):
        parse_dotted("a\\")


def test_commit_marker():
    assert decode_commit(b"ckpt-native commit\nmanifest-bytes 123\nmanifest-xxh3 00000000deadbeef\n", "c") == (123, 0xDEADBEEF)
    with pytest.raises(ckpt.CorruptCheckpointError, match="c: commit marker is malformed"):
        decode_commit(b"ckpt-native commit\nmanifest-bytes x\n", "c")
