"""Reading what tests/test_python_reader.cpp wrote: the values are the formulas it
fills them with."""

import mmap
import os

import numpy as np
import pytest

import ckpt

pytestmark = pytest.mark.filterwarnings("error")


def mapped(a):
    """Whether the array's memory is a file mapping (not a copy)."""
    base = a
    while base is not None:
        if isinstance(base, mmap.mmap):
            return True
        if isinstance(base, memoryview):
            base = base.obj
            continue
        base = getattr(base, "base", None)
    return False


KINDS_PATHS = [
    "flag", "i8", "u16", "i32", "u64", "f32", "f64", "c64", "c128", "bf16", "f16", "color", "text", "empty_text",
    "nothing", "something", "vec", "bits", "arr", "no_floats", "no_layers", "no_entries", "small", "large", "ints",
    "bf_array", "blob", "zero_rows", "names.a\\.b", "names.back\\\\slash", "names.plain", "layers.0.w",
    "layers.1.w", "rng",
]


def test_kinds_lists_every_leaf_with_dtype_and_shape(fixtures):
    ck = ckpt.open(fixtures / "kinds")
    assert ck.format_version == 1
    assert ck.paths() == KINDS_PATHS
    info = {leaf.path: (leaf.dtype, leaf.shape) for leaf in ck.leaves()}
    assert info["flag"] == ("bool", ())
    assert info["u64"] == ("uint64", ())
    assert info["c128"] == ("complex128", ())
    assert info["bf16"] == ("bfloat16", ())
    assert info["color"] == ("int16", ())
    assert info["text"] == ("string", ())
    assert info["nothing"] == ("none", ())
    assert info["no_floats"] == ("float32", (0,))
    assert info["no_layers"] == ("none", ()) and info["no_entries"] == ("none", ())  # empty nodes
    assert info["large"] == ("float32", (64, 48))
    assert info["ints"] == ("int64", (30, 4, 5))
    assert info["zero_rows"] == ("float64", (0, 3))
    assert ck.info("large").nbytes == 64 * 48 * 4
    assert ck.info(["names", "a.b"]).path == "names.a\\.b"
    assert "large" in ck and "missing" not in ck
    assert len(ck) == len(KINDS_PATHS)
    # small leaves in the manifest, large ones in data files
    assert ck.info("small").inline and ck.info("vec").inline
    assert not ck.info("large").inline and not ck.info("blob").inline and not ck.info("bf_array").inline


def test_kinds_scalars_strings_and_empty_nodes(fixtures):
    ck = ckpt.open(fixtures / "kinds")
    expect = {"flag": True, "i8": -5, "u16": 65000, "i32": -123456, "u64": 1 << 60, "f32": 1.5, "f64": -2.25,
              "c64": 1 - 2j, "c128": 3 + 4j, "bf16": -0.375, "f16": 0.099975586, "color": 7, "something": 42}
    for path, value in expect.items():
        a = ck.read(path)
        assert isinstance(a, np.ndarray) and a.shape == () and a.item() == pytest.approx(value), path
    assert ck.read("i8").dtype == np.int8 and ck.read("u64").dtype == np.uint64 and ck.read("c64").dtype == np.complex64
    assert ck.read("f16").dtype == np.float16
    assert ck.read("bf16").dtype == np.float32  # widened, exactly
    assert ck.read("bf16", raw=True).item() == 0xBEC0  # the stored bits
    assert ck.read("text").item() == "h\u00e9llo, ckpt"
    assert ck.read("empty_text").item() == ""
    assert ck.read("nothing") is None and ck.read("no_layers") is None and ck.read("no_entries") is None
    assert ck.read("no_floats").shape == (0,) and ck.read("no_floats").dtype == np.float32
    rng = ck.read("rng").item().split()
    assert len(rng) == 313 and rng[0] != "0"  # mt19937_64's textual state: 312 words and the index


def test_kinds_arrays_inline_and_memory_mapped(fixtures):
    ck = ckpt.open(fixtures / "kinds")
    np.testing.assert_array_equal(ck.read("vec"), [0.5, 1.5, 2.5])
    np.testing.assert_array_equal(ck.read("bits"), [True, False, True, True])
    np.testing.assert_array_equal(ck.read("arr"), np.array([7, 8, 9], dtype=np.int32))
    np.testing.assert_array_equal(ck.read("small"), np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5)
    i, j = np.meshgrid(np.arange(64), np.arange(48), indexing="ij")
    large = ck.read("large")
    np.testing.assert_array_equal(large, (i * 0.5 + j * 0.25).astype(np.float32))
    assert mapped(large) and not large.flags.writeable
    i, j, k = np.meshgrid(np.arange(30), np.arange(4), np.arange(5), indexing="ij")
    ints = ck.read("ints")
    assert ints.dtype == np.int64 and mapped(ints)
    np.testing.assert_array_equal(ints, i * 100 + j * 10 + k - 250)
    bf = ck.read("bf_array")
    assert bf.dtype == np.float32 and bf.shape == (2048,)
    np.testing.assert_array_equal(bf, (np.arange(2048) % 64) * 0.5 - 8)
    assert mapped(ck.read("bf_array", raw=True))
    blob = ck.read("blob")
    assert blob.dtype == np.uint8 and mapped(blob)
    np.testing.assert_array_equal(blob, (np.arange(5000) * 7 % 256).astype(np.uint8))
    assert ck.read("zero_rows").shape == (0, 3)
    assert ck.read("names.a\\.b").item() == 1 and ck.read("names.back\\\\slash").item() == 2
    np.testing.assert_array_equal(ck.read("layers.1.w"), [10, 11, 12])
    assert ck.verify() == sum(leaf.nbytes for leaf in ck.leaves())
    ck.read("large", verify=True)


def test_format_version_2_chunk_checksums(fixtures):
    ck = ckpt.open(fixtures / "chunked")
    assert ck.format_version == 2
    big = ck.read("big", verify=True)
    assert big.shape == (768 * 1024,) and mapped(big)
    np.testing.assert_array_equal(big, (np.arange(768 * 1024) % 1000) * 0.25)
    assert ck.read("step").item() == 3
    ck.verify()


def test_format_version_3_records(fixtures):
    ck = ckpt.open(fixtures / "records")
    assert ck.format_version == 3
    assert len(ck) == 1101
    assert ck.paths()[:3] == ["layers.0.w", "layers.1.w", "layers.2.w"] and ck.paths()[-1] == "big"
    for layer in (0, 1, 99, 100, 555, 1099):
        n = 1100 if layer % 100 == 0 else 4
        w = ck.read("layers.%d.w" % layer)
        assert ck.info("layers.%d.w" % layer).inline == (n == 4)
        np.testing.assert_array_equal(w, layer + np.arange(n) * 0.5)
    np.testing.assert_array_equal(ck.read("big"), (np.arange(600 * 1024) % 1000) * 0.25)
    ck.verify()


def test_a_sharded_leaf_of_one_box(fixtures):
    ck = ckpt.open(fixtures / "sharded_one")
    leaf = ck.info("w")
    assert leaf.sharded and leaf.shape == (6, 5) and len(leaf.boxes) == 1
    assert leaf.boxes[0].origin == (0, 0) and leaf.boxes[0].shape == (6, 5)
    i, j = np.meshgrid(np.arange(6), np.arange(5), indexing="ij")
    np.testing.assert_array_equal(ck.read("w", verify=True), 100 * i + j)
    assert ck.read("step").item() == 7


def test_manager_steps_marked_by_the_non_finite_guard(fixtures):
    steps = ckpt.steps(fixtures / "guarded")
    assert [(s.step, s.finite) for s in steps] == [(1, True), (2, False)]
    assert steps[0].save_stats["non_finite_values"] == 0
    assert steps[1].save_stats["non_finite_values"] == 1
    assert np.isnan(steps[1].open().read("head")[3])


def test_manager_steps_metrics_items_and_incremental_links(fixtures):
    root = fixtures / "run"
    steps = ckpt.steps(root)
    assert [s.step for s in steps] == [10, 20, 30]  # max_to_keep 3 pruned step 0
    assert steps == ckpt.steps(root, prefix="step_")
    assert ckpt.steps(root, prefix="other_") == []
    for s in steps:
        k = s.step // 10
        assert s.metrics == pytest.approx({"loss": 1.0 / (k + 1), "acc": 0.5 + 0.1 * k})
        assert s.format == "native" and s.time > 1.6e9 and s.commit_time >= s.time
        assert s.custom_metadata == {"host": "test", "step_again": s.step}
        assert s.items == {"dataset": "tree", "config": "json"}
        assert s.save_stats["incremental"] is True
        assert s.finite is True  # saved without guard_non_finite
        assert s.item("config") == {"lr": 0.001, "name": "run"}
        pos = s.item("dataset")
        assert pos.read("epoch").item() == k and pos.read("offset").item() == k * 100
        ck = s.open()
        assert ck.read("step").item() == s.step
        np.testing.assert_array_equal(ck.read("head"), s.step + (np.arange(384 * 1024) % 99))
        np.testing.assert_array_equal(ck.read("frozen"), (np.arange(512 * 1024) % 1000) * 0.25)
        ck.verify()
    # the frozen leaf's data file is one file, hard-linked into every step
    inodes = []
    for s in steps:
        leaf = s.open().info("frozen")
        inodes.append(os.stat(os.path.join(s.path, leaf.stored.file)).st_ino)
    assert len(set(inodes)) == 1
    with pytest.raises(ckpt.MissingLeafError, match="no item 'nope'"):
        steps[0].item("nope")


def test_a_manager_root_is_not_a_checkpoint(fixtures):
    with pytest.raises(ckpt.CorruptCheckpointError, match="CheckpointManager root"):
        ckpt.open(fixtures / "run")


def test_unknown_paths(fixtures):
    ck = ckpt.open(fixtures / "kinds")
    with pytest.raises(ckpt.MissingLeafError, match="kinds: larg: no such leaf") as e:
        ck.read("larg")
    assert isinstance(e.value, KeyError)
    with pytest.raises(ckpt.MissingLeafError, match="lone"):
        ck.read("large\\")
