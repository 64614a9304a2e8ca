"""Checkpoints written by 2 MPI ranks (tests/test_sharded.cpp, "mpi np2: the Python
reader ..."): sharded arrays assembled from their boxes, a replicated array the ranks
wrote split by rows, and the steps of the manager across ranks."""

import numpy as np
import pytest

import ckpt

pytestmark = pytest.mark.mpi


def grid(rows, cols):
    return np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")


def test_boxes_of_two_ranks_assemble(fixtures):
    ck = ckpt.open(fixtures / "c")
    assert ck.processes == 2 and ck.format_version == 2
    w = ck.info("w")
    assert w.sharded and w.shape == (9, 7)
    assert sorted((b.origin, b.shape, b.ranks) for b in w.boxes) == [((0, 0), (5, 7), (0,)), ((5, 0), (4, 7), (1,))]
    i, j = grid(9, 7)
    np.testing.assert_array_equal(ck.read("w"), 100 * i + j)
    big = ck.info("big")
    assert [b.origin for b in big.boxes] == [(0, 0), (512, 0)]
    assert all(b.pieces and b.tiles for b in big.boxes)  # larger than a piece, two dimensions
    i, j = grid(1024, 600)
    np.testing.assert_array_equal(ck.read("big", verify=True), i * 0.5 + j)
    shared = ck.info("shared")
    assert shared.sharded and len(shared.boxes) == 2  # replicated, written split by rows
    i, j = grid(600, 600)
    np.testing.assert_array_equal(ck.read("shared"), i - j * 0.5)
    assert ck.read("step").item() == 42
    assert ck.verify() == 4 * (9 * 7 + 1024 * 600 + 600 * 600) + 8


def test_a_damaged_box_is_named(copy_of):
    d = copy_of("c")
    ck = ckpt.open(d)
    box = ck.info("big").boxes[1]
    with open(d / box.stored.file, "r+b") as f:
        at = box.stored.offset + 600 * 4 * 300 + 8  # row 300 of the box
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 1]))
    with pytest.raises(ckpt.ChecksumError, match=r"big: box at \[512, 0\]: checksum mismatch in bytes \[0, \+1048576\)"):
        ckpt.open(d).verify()


def test_a_damaged_tile_checksum_is_named(copy_of):
    from damage import edit, leaf
    d = copy_of("c")

    def bad_tile(m):
        box = leaf(m, "big")["boxes"][0]
        tiles = bytearray(box["tiles"])
        tiles[8 * 3] ^= 1  # tile (0, 3)
        box["tiles"] = bytes(tiles)
    edit(d, bad_tile)
    with pytest.raises(ckpt.ChecksumError, match=r"big: box at \[0, 0\]: checksum mismatch in tile \(0, 3\)"):
        ckpt.open(d).verify()


def test_manager_steps_across_ranks(fixtures):
    steps = ckpt.steps(fixtures / "run")
    assert [s.step for s in steps] == [2, 3]
    for s in steps:
        assert s.metrics == pytest.approx({"loss": 1.0 / s.step})
        ck = s.open()
        assert ck.read("step").item() == s.step and ck.processes == 2
        i, j = grid(1024, 600)
        np.testing.assert_array_equal(ck.read("big"), i * 0.5 + j)


def test_boxes_naming_the_same_bytes_do_not_make_a_huge_array(copy_of):
    from damage import edit, leaf
    d = copy_of("c")

    def repeat(m):
        big = leaf(m, "big")
        box = big["boxes"][0]  # rows [0, 512): 1.2 MB in data-0
        big["boxes"] = [dict(box, origin=[512 * k, 0]) for k in range(4096)]
        big["shape"] = [512 * 4096, 600]
        big["length"] = 512 * 4096 * 600 * 4  # 5 GB, which 4096 boxes would cover with the same bytes
    edit(d, repeat)
    with pytest.raises(ckpt.CorruptCheckpointError, match="big: the boxes hold 1228800 of the array's 5033164800 bytes"):
        ckpt.open(d).read("big")
