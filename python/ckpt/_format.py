"""The native format's files, decoded and checked: the commit marker, the manifest
(format versions 1 to 3), its leaves and boxes. docs/format.md describes them.

Every field is checked before it is trusted (types, names, shapes against lengths,
boxes inside their array), so that a damaged or hostile manifest is a
CorruptCheckpointError here, never a huge allocation or a read outside the checkpoint
later. Whether bytes lie inside their data files is checked by the caller, which
measures the files."""

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import msgpack
import numpy as np

from ._errors import CorruptCheckpointError, UnsupportedError

FORMAT_NAME = "ckpt-native"
FORMAT_VERSION = 3  # the newest this reader reads
CHECKSUM_CHUNK_BYTES = 1 << 20  # a leaf longer than this carries per-chunk checksums
MAX_MANIFEST_BYTES = 1 << 32
MAX_COMMIT_BYTES = 4096
RECORD_INLINE = 0xFFFFFFFF
U64_MAX = (1 << 64) - 1
I64_MAX = (1 << 63) - 1

_DATA_FILE = re.compile(r"data-[0-9]{1,7}\Z")

# dtype name -> (bytes per element, numpy dtype or None when numpy has no such type).
# "string" is UTF-8 bytes (length = bytes), "none" an empty node (no bytes).
DTYPES = {
    "bool": (1, np.dtype("?")),
    "int8": (1, np.dtype("i1")),
    "int16": (2, np.dtype("<i2")),
    "int32": (4, np.dtype("<i4")),
    "int64": (8, np.dtype("<i8")),
    "uint8": (1, np.dtype("u1")),
    "uint16": (2, np.dtype("<u2")),
    "uint32": (4, np.dtype("<u4")),
    "uint64": (8, np.dtype("<u8")),
    "float16": (2, np.dtype("<f2")),
    "bfloat16": (2, None),
    "float32": (4, np.dtype("<f4")),
    "float64": (8, np.dtype("<f8")),
    "complex64": (8, np.dtype("<c8")),
    "complex128": (16, np.dtype("<c16")),
    "string": (1, None),
    "none": (0, None),
    "float8_e4m3fn": (1, None),
    "float8_e5m2": (1, None),
}


def is_numeric(dtype):
    return dtype not in ("string", "none")


def escape(segment):
    """A path segment as the C++ side writes it in a dotted path."""
    return segment.replace("\\", "\\\\").replace(".", "\\.").replace("\0", "\\0")


def dotted(segments):
    return ".".join(escape(s) for s in segments)


def parse_dotted(text):
    """The segments of a dotted path ("" is the root); the inverse of dotted()."""
    if text == "":
        return ()
    segs, seg, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 == len(text):
                raise ValueError("path %r ends with a lone '\\'" % text)
            n = text[i + 1]
            if n not in "0.\\":
                raise ValueError("unknown escape '\\%s' in path %r" % (n, text))
            seg.append("\0" if n == "0" else n)
            i += 2
            continue
        if c == ".":
            segs.append("".join(seg))
            seg = []
        else:
            seg.append(c)
        i += 1
    segs.append("".join(seg))
    return tuple(segs)


@dataclass
class Stored:
    """Where a leaf's (or a box's) bytes are: `file` None means inline in the manifest."""

    file: Optional[str]
    offset: int
    length: int
    xxh3: int
    inline: Optional[bytes] = None
    chunk_bytes: int = 0  # per-chunk checksums (format version 2), else 0
    chunk_xxh3: Tuple[int, ...] = ()


@dataclass
class Box:
    """One stored box of a sharded array: the part [origin, origin + shape) of it."""

    origin: Tuple[int, ...]
    shape: Tuple[int, ...]
    ranks: Tuple[int, ...]
    stored: Stored
    pieces: Tuple[int, ...] = ()  # xxh3 of each 1 MiB piece of the box's bytes
    tile_bytes: int = 0
    tile_rows: int = 0
    tiles: Tuple[int, ...] = ()


@dataclass
class Leaf:
    """A leaf as the manifest records it. For a sharded leaf, `shape` is the global
    array's and the bytes are in `boxes`; `stored` is then None."""

    segments: Tuple[str, ...]
    dtype: str
    shape: Tuple[int, ...]
    length: int
    stored: Optional[Stored]
    boxes: List[Box] = field(default_factory=list)

    @property
    def path(self):
        return dotted(self.segments)

    @property
    def sharded(self):
        return self.stored is None

    @property
    def nbytes(self):
        return self.length

    @property
    def inline(self):
        """Whether the bytes are in the manifest (small leaves) rather than a data file."""
        return self.stored is not None and self.stored.file is None


@dataclass
class Manifest:
    format_version: int
    library_version: str
    type_name: str
    fingerprint: int
    processes: int
    schema: List[Tuple[str, str, int]]
    leaves: List[Leaf]


def decode_commit(text, checkpoint):
    """(manifest bytes, manifest xxh3) from the commit marker's text."""
    bad = CorruptCheckpointError(checkpoint, "", "commit marker is malformed")
    if not text.startswith(b"ckpt-native commit\n"):
        raise bad
    size = re.search(rb"manifest-bytes ([0-9]+)", text)
    digest = re.search(rb"manifest-xxh3 ([0-9a-fA-F]+)", text)
    if not size or not digest:
        raise bad
    n, h = int(size.group(1)), int(digest.group(1), 16)
    if h > U64_MAX:
        raise bad
    if n > MAX_MANIFEST_BYTES:
        raise CorruptCheckpointError(checkpoint, "", "manifest size is implausible")
    return n, h


def le_u64s(b):
    return tuple(int(x) for x in np.frombuffer(b, dtype="<u8"))


def u64_list_bytes(values):
    return np.asarray(values, dtype="<u8").tobytes()


class _Fail:
    """Raises CorruptCheckpointErrors naming the checkpoint and the leaf being read."""

    def __init__(self, checkpoint):
        self.checkpoint = checkpoint
        self.path = ""

    def __call__(self, what):
        raise CorruptCheckpointError(self.checkpoint, self.path, "manifest: " + what)

    def uint(self, v, what, limit=U64_MAX):
        if type(v) is not int or v < 0 or v > limit:
            self("%s is not an unsigned integer" % what if type(v) is not int or v < 0 else "%s is too large" % what)
        return v

    def text(self, v, what):
        if not isinstance(v, str):
            self("%s is not a string" % what)
        return v

    def binary(self, v, what):
        if not isinstance(v, bytes):
            self("%s is not a binary" % what)
        return v

    def array(self, v, what):
        if not isinstance(v, list):
            self("%s is not an array" % what)
        return v

    def mapping(self, v, what):
        if not isinstance(v, dict):
            self("%s is not a map" % what)
        return v

    def shape(self, v, what="shape"):
        dims = tuple(self.uint(d, what, I64_MAX) for d in self.array(v, what))
        return dims


def _elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _shape_fault(fail, dtype, shape, length):
    if is_numeric(dtype):
        if _elements(shape) * DTYPES[dtype][0] != length:
            fail("shape %s of %s needs %d elements but %d bytes are recorded"
                 % (list(shape), dtype, _elements(shape), length))
    elif dtype == "none" and length != 0:
        fail("an empty node has bytes")
    elif dtype == "string" and shape:
        fail("string leaves must be scalars")


def _dtype(fail, v):
    name = fail.text(v, "dtype")
    if name not in DTYPES:
        fail("unknown dtype %r" % name)
    return name


def _storage(fail, m, length):
    """The storage fields of a leaf's or a box's map."""
    offset = fail.uint(m.get("offset"), "offset")
    xxh3 = fail.uint(m.get("xxh3"), "xxh3")
    if "file" not in m:
        fail("no file")
    f = m["file"]
    if f is None:
        inline = fail.binary(m.get("inline"), "inline")
        if len(inline) != length:
            fail("inline bytes do not match the length")
        return Stored(None, offset, length, xxh3, inline=inline)
    fail.text(f, "file")
    if not _DATA_FILE.match(f):
        fail("data file name %r is not one ckpt writes" % f)
    codec = m.get("codec", "raw")
    if codec != "raw":
        raise UnsupportedError(fail.checkpoint, fail.path,
                               "codec %r is not supported (the native format stores raw bytes)" % (codec,))
    return Stored(f, offset, length, xxh3)


def _boxes(fail, dtype, shape, v):
    if not is_numeric(dtype):
        fail("only numeric arrays can be stored as boxes")
    size = DTYPES[dtype][0]
    boxes = []
    for b in fail.array(v, "boxes"):
        fail.mapping(b, "box")
        origin = fail.shape(b.get("origin"), "box origin")
        bshape = fail.shape(b.get("shape"), "box shape")
        if len(origin) != len(shape) or len(bshape) != len(shape):
            fail("a box's rank is not the array's")
        for o, n, g in zip(origin, bshape, shape):
            if n > g or o > g - n:
                fail("box at %s of shape %s lies outside the shape %s" % (list(origin), list(bshape), list(shape)))
        length = fail.uint(b.get("length"), "length")
        if _elements(bshape) * size != length:
            fail("box of shape %s records %d bytes" % (list(bshape), length))
        ranks = tuple(fail.uint(r, "rank") for r in fail.array(b.get("ranks", []), "ranks"))
        pieces = b.get("pieces", b"")
        if len(fail.binary(pieces, "box pieces")) % 8:
            fail("box pieces must be binary")
        box = Box(origin, bshape, ranks, _storage(fail, b, length), pieces=le_u64s(pieces))
        if "tiles" in b:
            tiles = fail.binary(b["tiles"], "box tiles")
            box.tile_bytes = fail.uint(b.get("tile_bytes"), "tile_bytes")
            box.tile_rows = fail.uint(b.get("tile_rows"), "tile_rows")
            grid = tile_grid(bshape, size, box.tile_bytes, box.tile_rows)
            if grid is None:
                fail("box tiles of %d bytes by %d rows do not fit the box of shape %s"
                     % (box.tile_bytes, box.tile_rows, list(bshape)))
            if len(tiles) != 8 * grid_count(grid):
                fail("box tiles must hold %d checksums, not %d" % (grid_count(grid), len(tiles) // 8))
            box.tiles = le_u64s(tiles)
        boxes.append(box)
    return boxes


def tile_grid(shape, elem, tile_bytes, tile_rows):
    """(rows, row bytes, tile bytes, tile rows) of a box's recorded tile grid, or None
    when ckpt could not have cut it so (io/tile_checksums.hpp)."""
    if len(shape) < 2:
        return None
    rows = _elements(shape[:-1])
    row_bytes = shape[-1] * elem
    if rows == 0 or row_bytes < 256 or tile_bytes == 0 or tile_rows == 0 or tile_bytes >= row_bytes or tile_rows > rows:
        return None
    return rows, row_bytes, tile_bytes, tile_rows


def grid_count(grid):
    rows, row_bytes, tile_bytes, tile_rows = grid
    return -(-row_bytes // tile_bytes) * -(-rows // tile_rows)


def _leaf_map(fail, m, version):
    fail.mapping(m, "leaf")
    segments = tuple(fail.text(s, "path segment") for s in fail.array(m.get("path"), "path"))
    fail.path = dotted(segments)
    dtype = _dtype(fail, m.get("dtype"))
    shape = fail.shape(m.get("shape"))
    length = fail.uint(m.get("length"), "length")
    _shape_fault(fail, dtype, shape, length)
    if "boxes" in m:
        return Leaf(segments, dtype, shape, length, None, _boxes(fail, dtype, shape, m["boxes"]))
    stored = _storage(fail, m, length)
    if "chunk_xxh3" in m:
        if version < 2:
            fail("chunk_xxh3 in a version 1 manifest")
        if stored.file is None:
            fail("an inline leaf has chunk checksums")
        chunks = fail.binary(m["chunk_xxh3"], "chunk_xxh3")
        cb = fail.uint(m.get("chunk_bytes"), "chunk_bytes")
        if cb < 4096 or cb > 1 << 30 or cb & (cb - 1):
            fail("chunk_bytes %d is not a power of two in [4 KiB, 1 GiB]" % cb)
        n = -(-length // cb)
        if len(chunks) != 8 * n:
            fail("chunk_xxh3 must hold %d checksums for %d bytes" % (n, length))
        stored.chunk_bytes = cb
        stored.chunk_xxh3 = le_u64s(chunks)
    return Leaf(segments, dtype, shape, length, stored)


_RECORD = np.dtype([("offset", "<u8"), ("length", "<u8"), ("xxh3", "<u8"), ("file", "<u4"),
                    ("dtype", "<u4"), ("dims_at", "<u4"), ("rank", "<u4")])


class _Records:
    """A version 3 manifest's record tables: the k-th leaf written as a path takes the
    k-th record."""

    def __init__(self, fail, root):
        self.files = [fail.text(f, "file") for f in fail.array(root.get("files"), "files")]
        for f in self.files:
            if not _DATA_FILE.match(f):
                fail("data file name %r is not one ckpt writes" % f)
        self.dtypes = [_dtype(fail, d) for d in fail.array(root.get("dtypes"), "dtypes")]
        recs = fail.binary(root.get("records"), "records")
        dims = fail.binary(root.get("dims"), "dims")
        self.inline = fail.binary(root.get("inline"), "inline")
        if len(recs) % _RECORD.itemsize:
            fail("records must be a binary of %d-byte items" % _RECORD.itemsize)
        if len(dims) % 8:
            fail("dims must be a binary of 8-byte items")
        self.records = np.frombuffer(recs, dtype=_RECORD).tolist()
        self.dims = np.frombuffer(dims, dtype="<u8").tolist()
        self.next = 0

    def take(self, fail, segments):
        if self.next >= len(self.records):
            fail("more leaves are written as paths than there are records (%d)" % len(self.records))
        offset, length, xxh3, f, d, dims_at, rank = self.records[self.next]
        self.next += 1
        if d >= len(self.dtypes):
            fail("dtype number %d is not one of the %d recorded" % (d, len(self.dtypes)))
        if rank > len(self.dims) or dims_at > len(self.dims) - rank:
            fail("shape [%d, +%d) lies outside the %d recorded dimensions" % (dims_at, rank, len(self.dims)))
        shape = tuple(self.dims[dims_at:dims_at + rank])
        if any(x > I64_MAX for x in shape):
            fail("shape %s is invalid" % list(shape))
        dtype = self.dtypes[d]
        _shape_fault(fail, dtype, shape, length)
        if f == RECORD_INLINE:
            if offset > len(self.inline) or length > len(self.inline) - offset:
                fail("inline bytes [%d, +%d) lie outside the %d recorded" % (offset, length, len(self.inline)))
            stored = Stored(None, offset, length, xxh3, inline=self.inline[offset:offset + length])
        elif f >= len(self.files):
            fail("data file number %d is not one of the %d recorded" % (f, len(self.files)))
        else:
            stored = Stored(self.files[f], offset, length, xxh3)
        return Leaf(segments, dtype, shape, length, stored)


def decode_manifest(data, checkpoint):
    """The manifest's bytes (already checked against the commit marker) as a Manifest."""
    fail = _Fail(checkpoint)
    try:
        # msgpack bounds every count by the bytes it is given: no hostile allocation.
        root = msgpack.unpackb(data, raw=False, strict_map_key=False, unicode_errors="surrogateescape")
    except Exception as e:  # any failure to parse untrusted bytes: msgpack's, or an unhashable key
        fail("malformed msgpack: %s" % e)
    fail.mapping(root, "the manifest")
    fmt = root.get("format")
    if fmt != FORMAT_NAME:
        fail("format is %r, not %s" % (fmt, FORMAT_NAME))
    version = fail.uint(root.get("format_version"), "format_version")
    if version > FORMAT_VERSION:
        raise UnsupportedError(checkpoint, "", "format version %d is newer than this reader reads (%d)"
                               % (version, FORMAT_VERSION))
    schema = []
    for s in fail.array(root.get("schema", []), "schema"):
        if not isinstance(s, list) or len(s) != 3:
            fail("schema entry must have 3 items")
        schema.append((fail.text(s[0], "schema path"), fail.text(s[1], "schema dtype"), s[2]))
    records = _Records(fail, root) if version >= 3 else None
    leaves = []
    for m in fail.array(root.get("leaves"), "leaves"):
        fail.path = ""
        if isinstance(m, list):  # version 3: the path; the rest is the next record
            if records is None:
                fail("a leaf written as a path in a version %d manifest" % version)
            segments = tuple(fail.text(s, "path segment") for s in m)
            fail.path = dotted(segments)
            leaves.append(records.take(fail, segments))
        else:
            leaves.append(_leaf_map(fail, m, version))
    fail.path = ""
    if records is not None and records.next != len(records.records):
        fail("%d of %d leaf records belong to no leaf" % (len(records.records) - records.next, len(records.records)))
    return Manifest(
        format_version=version,
        library_version=str(root.get("library_version", "")),
        type_name=str(root.get("type", "")),
        fingerprint=root.get("fingerprint", 0),
        processes=fail.uint(root.get("processes", 1), "processes"),
        schema=schema,
        leaves=leaves,
    )
