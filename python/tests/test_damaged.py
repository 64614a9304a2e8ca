"""Damaged and hostile checkpoints: each is a ckpt.Error saying what is wrong and
where, never a crash, a hang or a huge allocation."""

import os

import msgpack
import numpy as np
import pytest

import ckpt
from ckpt import _checkpoint
from damage import edit, leaf, load, recommit


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))


def data_file_of(ck_dir, dotted):
    s = ckpt.open(ck_dir).info(dotted).stored
    return ck_dir / s.file, s.offset


def test_no_commit_marker(copy_of):
    d = copy_of("kinds")
    os.remove(d / "commit")
    with pytest.raises(ckpt.CorruptCheckpointError, match="kinds: no commit marker"):
        ckpt.open(d)


def test_no_such_directory(tmp_path):
    with pytest.raises(ckpt.NotFoundError, match="no such checkpoint directory"):
        ckpt.open(tmp_path / "absent")
    with pytest.raises(ckpt.NotFoundError):
        ckpt.steps(tmp_path / "absent")


def test_malformed_commit_marker(copy_of):
    d = copy_of("kinds")
    (d / "commit").write_text("something else\n")
    with pytest.raises(ckpt.CorruptCheckpointError, match="commit marker is malformed"):
        ckpt.open(d)
    (d / "commit").write_text("ckpt-native commit\nmanifest-bytes 99999999999999\nmanifest-xxh3 00\n")
    with pytest.raises(ckpt.CorruptCheckpointError, match="manifest size is implausible"):
        ckpt.open(d)


def test_a_fifo_in_place_of_a_file_does_not_hang(copy_of):
    d = copy_of("kinds")
    os.remove(d / "commit")
    os.mkfifo(d / "commit")
    with pytest.raises(ckpt.CorruptCheckpointError, match="commit is not a regular file"):
        ckpt.open(d)


def test_truncated_manifest(copy_of):
    d = copy_of("kinds")
    m = (d / "manifest").read_bytes()
    (d / "manifest").write_bytes(m[: len(m) // 2])
    with pytest.raises(ckpt.CorruptCheckpointError, match="truncated"):
        ckpt.open(d)


def test_altered_manifest(copy_of):
    d = copy_of("kinds")
    flip(d / "manifest", 40)
    with pytest.raises(ckpt.ChecksumError, match="manifest checksum mismatch"):
        ckpt.open(d)


def test_truncated_data_file_names_the_leaf(copy_of):
    d = copy_of("kinds")
    f, offset = data_file_of(d, "blob")
    os.truncate(f, offset + 100)
    with pytest.raises(ckpt.CorruptCheckpointError, match=r"kinds: blob: bytes \[\d+, \+5000\) lie outside data-0"):
        ckpt.open(d)


def test_missing_data_file(copy_of):
    d = copy_of("kinds")
    f, _ = data_file_of(d, "large")
    os.remove(f)
    with pytest.raises(ckpt.CorruptCheckpointError, match="large: data file data-0 is missing"):
        ckpt.open(d)


def test_data_file_through_a_symbolic_link_is_refused(copy_of, tmp_path):
    d = copy_of("kinds")
    f, _ = data_file_of(d, "large")
    os.rename(f, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", f)
    with pytest.raises(ckpt.CorruptCheckpointError, match="data-0 cannot be opened"):
        ckpt.open(d)


def test_flipped_data_byte_fails_verify_naming_the_leaf(copy_of):
    d = copy_of("kinds")
    f, offset = data_file_of(d, "ints")
    flip(f, offset + 17)
    ck = ckpt.open(d)
    ck.read("large", verify=True)  # other leaves still read
    ck.read("ints")  # not verified unless asked
    with pytest.raises(ckpt.ChecksumError, match="kinds: ints: checksum mismatch"):
        ck.read("ints", verify=True)
    with pytest.raises(ckpt.ChecksumError, match="ints: checksum mismatch"):
        ck.verify()


def test_flipped_byte_in_a_chunked_leaf_names_the_chunk(copy_of):
    d = copy_of("chunked")
    f, offset = data_file_of(d, "big")
    flip(f, offset + (2 << 20) + 5)
    with pytest.raises(ckpt.ChecksumError, match=r"big: checksum mismatch in bytes \[2097152, \+1048576\)"):
        ckpt.open(d).verify()


def test_flipped_byte_in_an_inline_leaf(copy_of):
    d = copy_of("kinds")
    edit(d, lambda m: leaf(m, "vec").__setitem__("inline", b"\x00" * 24))
    with pytest.raises(ckpt.ChecksumError, match="vec: checksum mismatch"):
        ckpt.open(d).verify()


def test_without_xxhash_verify_says_what_is_missing(fixtures, monkeypatch):
    monkeypatch.setattr(_checkpoint, "xxhash", None)
    ck = ckpt.open(fixtures / "kinds")  # opens: the manifest's size is checked, not its hash
    assert ck.read("u16").item() == 65000
    with pytest.raises(ckpt.XxhashMissingError, match="python3-xxhash"):
        ck.verify()
    with pytest.raises(ckpt.XxhashMissingError, match="xxhash module"):
        ck.read("large", verify=True)


def test_bad_msgpack(copy_of):
    d = copy_of("kinds")
    recommit(d, b"\x85\xa6format\xabckpt-native\xc1\xc1")
    with pytest.raises(ckpt.CorruptCheckpointError, match="malformed msgpack"):
        ckpt.open(d)
    # an array claiming 2^32 - 1 items in a few bytes: refused, not allocated
    recommit(d, b"\x81\xa6leaves\xdd\xff\xff\xff\xff\x00")
    with pytest.raises(ckpt.CorruptCheckpointError, match="malformed msgpack"):
        ckpt.open(d)
    recommit(d, msgpack.packb([1, 2, 3]))
    with pytest.raises(ckpt.CorruptCheckpointError, match="the manifest is not a map"):
        ckpt.open(d)


@pytest.mark.parametrize("change, message", [
    (lambda e: e.__setitem__("shape", [1 << 40, 1 << 20]), r"shape \[1099511627776, 1048576\] of float32 needs"),
    (lambda e: e.update(shape=[1 << 40, 1 << 20], length=(1 << 62)), r"bytes \[\d+, \+4611686018427387904\) lie outside"),
    (lambda e: e.__setitem__("shape", [-1, 48]), "shape is not an unsigned integer"),
    (lambda e: e.__setitem__("dtype", "float128"), "unknown dtype 'float128'"),
    (lambda e: e.__setitem__("file", "../../etc/passwd"), "data file name '../../etc/passwd' is not one ckpt writes"),
    (lambda e: e.__setitem__("offset", 1 << 63), r"lie outside data-0"),
    (lambda e: e.__setitem__("xxh3", "abc"), "xxh3 is not an unsigned integer"),
])
def test_hostile_leaf_fields(copy_of, change, message):
    d = copy_of("kinds")
    edit(d, lambda m: change(leaf(m, "large")))
    with pytest.raises(ckpt.CorruptCheckpointError, match="kinds: large: .*" + message):
        ckpt.open(d)


def test_hostile_boxes(copy_of):
    d = copy_of("sharded_one")
    # a global shape far larger than the boxes' bytes: refused before anything is allocated
    def grow(m):
        w = leaf(m, "w")
        w["shape"] = [1 << 30, 1 << 20]
        w["length"] = (1 << 50) * 4
    edit(d, grow)
    with pytest.raises(ckpt.CorruptCheckpointError, match="w: the boxes hold 120 of the array's .* in none of the saved boxes"):
        ckpt.open(d).read("w")
    d = copy_of("sharded_one")
    edit(d, lambda m: leaf(m, "w")["boxes"][0].__setitem__("origin", [3, 0]))
    with pytest.raises(ckpt.CorruptCheckpointError, match=r"box at \[3, 0\] of shape \[6, 5\] lies outside"):
        ckpt.open(d)


def test_unsupported_codec_names_codec_and_leaf(copy_of):
    d = copy_of("kinds")
    edit(d, lambda m: leaf(m, "large").__setitem__("codec", "zstd"))
    with pytest.raises(ckpt.UnsupportedError, match="kinds: large: codec 'zstd' is not supported"):
        ckpt.open(d)


def test_newer_format_version(copy_of):
    d = copy_of("kinds")
    edit(d, lambda m: m.__setitem__("format_version", 4))
    with pytest.raises(ckpt.UnsupportedError, match="format version 4 is newer than this reader reads"):
        ckpt.open(d)


def test_hostile_records(copy_of):
    d = copy_of("records")

    def bad_file_number(m):
        rec = bytearray(m["records"])
        rec[24:28] = (77).to_bytes(4, "little")  # the first record's file
        m["records"] = bytes(rec)
    edit(d, bad_file_number)
    with pytest.raises(ckpt.CorruptCheckpointError, match="layers.0.w: manifest: data file number 77 is not one of"):
        ckpt.open(d)
    d = copy_of("records")
    edit(d, lambda m: m.__setitem__("records", m["records"][:-40]))
    with pytest.raises(ckpt.CorruptCheckpointError, match="more leaves are written as paths than there are records"):
        ckpt.open(d)
    d = copy_of("records")

    def wide_shape(m):
        rec = bytearray(m["records"])
        rec[36:40] = (1 << 30).to_bytes(4, "little")  # the first record's rank
        m["records"] = bytes(rec)
    edit(d, wide_shape)
    with pytest.raises(ckpt.CorruptCheckpointError, match="lies outside the .* recorded dimensions"):
        ckpt.open(d)


def test_float8_leaves_widen_exactly(copy_of):
    # No C++ element type is float8 (safetensors' F8 types are saved byte for byte): the
    # blob's bytes renamed as float8 codes.
    d = copy_of("kinds")
    edit(d, lambda m: leaf(m, "blob").__setitem__("dtype", "float8_e4m3fn"))
    a = ckpt.open(d).read("blob")
    codes = (np.arange(5000) * 7 % 256).astype(np.uint8)
    assert a.dtype == np.float32
    by_code = dict(zip(codes.tolist(), a.tolist()))
    assert by_code[0x38] == 1.0 and by_code[0x40] == 2.0 and by_code[0xC0] == -2.0 and by_code[0x01] == 2.0 ** -9
    assert by_code[0x7E] == 448.0 and np.isnan(by_code[0x7F]) and np.isnan(by_code[0xFF])
    edit(d, lambda m: leaf(m, "blob").__setitem__("dtype", "float8_e5m2"))
    by_code = dict(zip(codes.tolist(), ckpt.open(d).read("blob").tolist()))
    assert by_code[0x3C] == 1.0 and by_code[0x7C] == np.inf and np.isnan(by_code[0x7D]) and by_code[0x7B] == 57344.0


def test_corrupt_step_metadata(copy_of):
    d = copy_of("run")
    step = ckpt.steps(d)[0]
    with open(os.path.join(step.path, "_CHECKPOINT_METADATA"), "w") as f:
        f.write("{not json")
    with pytest.raises(ckpt.CorruptCheckpointError, match="_CHECKPOINT_METADATA is not valid JSON"):
        ckpt.steps(d)


def test_an_interrupted_step_is_not_a_step(copy_of):
    d = copy_of("run")
    os.remove(d / "step_20" / "commit")
    os.mkdir(d / ".tmp-step_40-abc")
    assert [s.step for s in ckpt.steps(d)] == [10, 30]


def test_edited_manifest_still_reads(copy_of):
    # the helper itself: a manifest re-encoded unchanged reads as before
    d = copy_of("kinds")
    edit(d, lambda m: None)
    assert load(d)["format"] == "ckpt-native"
    assert ckpt.open(d).read("u16").item() == 65000
