"""ckpt.open(path): a native checkpoint directory, its leaves, their arrays."""

import mmap
import os
import stat

import numpy as np

from . import _format
from ._errors import (ChecksumError, CorruptCheckpointError, Error, MissingLeafError, NotFoundError,
                      XxhashMissingError)
from ._format import DTYPES, dotted, parse_dotted

try:
    import xxhash
except ImportError:  # optional: only checksums need it
    xxhash = None

PIECE_BYTES = 1 << 20  # what verification reads at a time


def _xxh3(data, seed=0):
    return xxhash.xxh3_64_intdigest(data, seed)


def _open_regular(path, checkpoint, what):
    """An fd of the regular file at path, never through a symbolic link (a key of the
    checkpoint may not point outside it); None when it does not exist."""
    try:
        # O_NONBLOCK: a FIFO in a checkpoint's place must not hang the open (no effect on files)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise CorruptCheckpointError(checkpoint, "", "%s cannot be opened: %s" % (what, e.strerror)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CorruptCheckpointError(checkpoint, "", "%s is not a regular file" % what)
    return fd


def _read_exact(fd, n, at, checkpoint, path, what):
    """n bytes of fd from `at`; a short file is a CorruptCheckpointError."""
    parts, done = [], 0
    while done < n:
        try:
            b = os.pread(fd, n - done, at + done)
        except OSError as e:
            raise CorruptCheckpointError(checkpoint, path, "%s cannot be read: %s" % (what, e.strerror)) from None
        if not b:
            raise CorruptCheckpointError(checkpoint, path, "%s ends at byte %d, before byte %d (truncated?)"
                                         % (what, at + done, at + n))
        parts.append(b)
        done += len(b)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _bfloat16_to_float32(bits):
    wide = bits.reshape(-1).astype("<u4") << np.uint32(16)
    return wide.view("<f4").reshape(bits.shape)


def _float8_table(exp_bits, man_bits, bias, ieee):
    """float32 values of the 256 codes of a float8 type (ml_dtypes' float8_e4m3fn: no
    infinities, NaN at all ones; float8_e5m2: IEEE-like)."""
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> man_bits) & ((1 << exp_bits) - 1)
    m = codes & ((1 << man_bits) - 1)
    normal = (1 + m / (1 << man_bits)) * np.exp2(e.astype(float) - bias)
    sub = (m / (1 << man_bits)) * np.exp2(1.0 - bias)
    v = sign * np.where(e == 0, sub, normal)
    top = e == (1 << exp_bits) - 1
    if ieee:
        v = np.where(top & (m == 0), sign * np.inf, v)
        v = np.where(top & (m != 0), np.nan, v)
    else:
        v = np.where(top & (m == (1 << man_bits) - 1), np.nan, v)
    return v.astype("<f4")


# Dtypes numpy has no type for: the type they are read as (exactly: every value fits)
# and how; `raw=True` gives the stored bits instead.
_WIDENED = {
    "bfloat16": (np.dtype("<u2"), _bfloat16_to_float32),
    "float8_e4m3fn": (np.dtype("u1"), lambda b, t=_float8_table(4, 3, 7, False): t[b]),
    "float8_e5m2": (np.dtype("u1"), lambda b, t=_float8_table(5, 2, 15, True): t[b]),
}


def _storage_dtype(dtype):
    return _WIDENED[dtype][0] if dtype in _WIDENED else DTYPES[dtype][1]


class Checkpoint:
    """A native checkpoint, opened: its commit marker and manifest read and checked,
    its data files open and measured. Leaves are read on demand."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self._fds, self._maps, self._leaves = {}, {}, []
        ck = self.path
        if not os.path.isdir(ck):
            raise NotFoundError(ck, "", "no such checkpoint directory")
        fd = _open_regular(os.path.join(ck, "commit"), ck, "commit")
        if fd is None:
            hint = _steps_hint(ck)
            raise CorruptCheckpointError(ck, "", "no commit marker: not a complete checkpoint (a save was interrupted?)"
                                         + hint)
        try:
            commit = os.read(fd, _format.MAX_COMMIT_BYTES + 1)
        finally:
            os.close(fd)
        if len(commit) > _format.MAX_COMMIT_BYTES:
            raise CorruptCheckpointError(ck, "", "commit marker is malformed")
        size, digest = _format.decode_commit(commit, ck)
        fd = _open_regular(os.path.join(ck, "manifest"), ck, "manifest")
        if fd is None:
            raise CorruptCheckpointError(ck, "", "manifest is missing")
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise CorruptCheckpointError(ck, "", "manifest is %d bytes, the commit marker records %d (truncated?)"
                                             % (actual, size))
            self._manifest_bytes = _read_exact(fd, size, 0, ck, "", "manifest")
        finally:
            os.close(fd)
        self._manifest_xxh3 = digest
        self._manifest_checked = False
        if xxhash is not None:
            self._check_manifest()
        m = _format.decode_manifest(self._manifest_bytes, ck)
        self.format_version = m.format_version
        self.library_version = m.library_version
        self.type_name = m.type_name
        self.fingerprint = m.fingerprint
        self.processes = m.processes
        self.schema = m.schema
        self._leaves = m.leaves
        self._by_path = {}
        for leaf in m.leaves:
            self._by_path.setdefault(leaf.segments, leaf)
        try:
            self._open_data_files()
        except BaseException:
            self.close()
            raise

    # ---- opening ----

    def _check_manifest(self):
        if _xxh3(self._manifest_bytes) != self._manifest_xxh3:
            raise ChecksumError(self.path, "", "manifest checksum mismatch: the manifest was altered or torn")
        self._manifest_checked = True

    def _stored(self):
        """(leaf, Stored) of every stored piece of bytes, in manifest order."""
        for leaf in self._leaves:
            if leaf.stored is not None:
                yield leaf, leaf.stored
            for b in leaf.boxes:
                yield leaf, b.stored

    def _open_data_files(self):
        sizes = {}
        for leaf, s in self._stored():
            if s.file is None:
                continue
            if s.file not in sizes:
                fd = _open_regular(os.path.join(self.path, s.file), self.path, s.file)
                if fd is not None:
                    self._fds[s.file] = fd
                    sizes[s.file] = os.fstat(fd).st_size
                else:
                    sizes[s.file] = None
            size = sizes[s.file]
            if size is None:
                raise CorruptCheckpointError(self.path, leaf.path, "data file %s is missing or unreadable" % s.file)
            if s.offset > size or s.length > size - s.offset:
                raise CorruptCheckpointError(self.path, leaf.path, "bytes [%d, +%d) lie outside %s (%d bytes; truncated?)"
                                             % (s.offset, s.length, s.file, size))

    def close(self):
        """Closes the data files. Arrays already read stay valid (they hold their own
        mappings)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}
        self._maps = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---- what it holds ----

    def leaves(self):
        """Every leaf as the manifest records it (path, dtype, shape, nbytes, ...), in the
        order the C++ side wrote them."""
        return list(self._leaves)

    def paths(self):
        """The dotted path of every leaf ("params.encoder.kernel", "layers.0.bias"; a
        '.' or '\\' inside a segment is escaped with '\\', as the C++ side does)."""
        return [leaf.path for leaf in self._leaves]

    def info(self, path):
        """The Leaf of `path` (a dotted path, or a sequence of segments)."""
        segments = tuple(path) if isinstance(path, (tuple, list)) else None
        if segments is None:
            try:
                segments = parse_dotted(path)
            except ValueError as e:
                raise MissingLeafError(self.path, str(path), str(e)) from None
        leaf = self._by_path.get(segments)
        if leaf is None:
            raise MissingLeafError(self.path, dotted(segments), "no such leaf in the checkpoint")
        return leaf

    def __contains__(self, path):
        try:
            self.info(path)
            return True
        except MissingLeafError:
            return False

    def __iter__(self):
        return iter(self.paths())

    def __len__(self):
        return len(self._leaves)

    def __repr__(self):
        return "ckpt.Checkpoint(%r: %d leaves, format version %d)" % (self.path, len(self._leaves),
                                                                       getattr(self, "format_version", 0))

    # ---- reading ----

    def read(self, path, *, verify=False, raw=False):
        """The leaf at `path` as a read-only numpy.ndarray.

        Arrays stored whole in a data file are memory-mapped (nothing is read until
        used); small leaves come from the manifest; sharded leaves are assembled from
        their boxes. bfloat16 and float8 leaves are widened to float32 (exact), unless
        raw=True, which gives their stored bits (uint16 / uint8). A string leaf is a 0-d
        array of str; an empty node (an empty optional or container) is None.
        verify=True checks the leaf's checksums first (needs xxhash)."""
        leaf = self.info(path)
        if verify:
            self._verify_leaf(leaf)
        if leaf.dtype == "none":
            return None
        if leaf.dtype == "string":
            raw_bytes = bytes(self._bytes_view(leaf, leaf.stored))
            return np.array(raw_bytes.decode("utf-8", errors="surrogateescape"))
        storage = _storage_dtype(leaf.dtype)
        if leaf.sharded:
            a = self._assemble(leaf, storage)
        else:
            a = self._array(leaf, leaf.stored, leaf.shape, storage)
        if leaf.dtype in _WIDENED and not raw:
            a = _WIDENED[leaf.dtype][1](a)
            a.flags.writeable = False
        return a

    def _mapping(self, name):
        m = self._maps.get(name)
        if m is None:
            fd = self._fds.get(name)
            if fd is None:
                raise Error(self.path, "", "the checkpoint is closed")
            m = self._maps[name] = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        return m

    def _bytes_view(self, leaf, s):
        """A leaf's or box's bytes: a memoryview of the manifest or of the data file's mapping."""
        if s.length == 0:
            return memoryview(b"")
        if s.file is None:
            return memoryview(s.inline)
        m = self._mapping(s.file)
        if len(m) < s.offset + s.length:
            raise CorruptCheckpointError(self.path, leaf.path, "%s was cut short since the checkpoint was opened" % s.file)
        return memoryview(m)[s.offset:s.offset + s.length]

    def _array(self, leaf, s, shape, storage):
        if s.length == 0:
            a = np.zeros(shape, dtype=storage)
        else:
            a = np.frombuffer(self._bytes_view(leaf, s), dtype=storage).reshape(shape)
        a.flags.writeable = False
        return a

    def _assemble(self, leaf, storage):
        """A sharded leaf's global array from its boxes. The boxes' bytes lie in files
        already measured (or in the manifest), so an array larger than the bytes they
        span is refused before any allocation, however many boxes name the same bytes."""
        stored = _span_bytes(b.stored for b in leaf.boxes)
        if stored < leaf.length:
            raise CorruptCheckpointError(self.path, leaf.path, "the boxes hold %d of the array's %d bytes: part of it is "
                                         "in none of the saved boxes" % (stored, leaf.length))
        out = np.empty(leaf.shape, dtype=storage)
        covered = np.zeros(leaf.shape, dtype=bool)
        for b in leaf.boxes:
            where = tuple(slice(o, o + n) for o, n in zip(b.origin, b.shape))
            out[where] = self._array(leaf, b.stored, b.shape, storage)
            covered[where] = True
        if not covered.all():
            missing = np.argwhere(~covered)[0].tolist()
            raise CorruptCheckpointError(self.path, leaf.path, "element %s is in none of the saved boxes" % missing)
        out.flags.writeable = False
        return out

    # ---- checksums ----

    def verify(self):
        """Checks the manifest and every leaf's bytes against their xxh3 checksums
        (per-chunk, per-box, per-piece and per-tile ones too), as `ckpt verify` does.
        Raises ChecksumError naming the leaf at the first mismatch; returns the number of
        bytes verified. Needs the xxhash module."""
        _need_xxhash("verify")
        self._check_manifest()
        total = 0
        for leaf in self._leaves:
            total += self._verify_leaf(leaf)
        return total

    def _verify_leaf(self, leaf):
        _need_xxhash("checksum verification")
        if not self._manifest_checked:
            self._check_manifest()
        if not leaf.sharded:
            s = leaf.stored
            if s.chunk_xxh3:
                if _xxh3(_format.u64_list_bytes(s.chunk_xxh3)) != s.xxh3:
                    raise ChecksumError(self.path, leaf.path, "manifest: chunk checksums do not match the leaf's xxh3")
                self._check_pieces(leaf, s, s.chunk_bytes, s.chunk_xxh3, whole=False)
            else:
                self._check_pieces(leaf, s, PIECE_BYTES, (), whole=True)
            return s.length
        for b in leaf.boxes:
            # Writers since format version 2 hash a box larger than a chunk piece by piece,
            # its xxh3 then being that of the pieces' list; earlier ones hashed it whole.
            chained = bool(b.pieces) and _xxh3(_format.u64_list_bytes(b.pieces)) == b.stored.xxh3
            self._check_pieces(leaf, b.stored, PIECE_BYTES, b.pieces, whole=not chained, box=b)
            if b.tiles:
                self._check_tiles(leaf, b)
        return sum(b.stored.length for b in leaf.boxes)

    def _pieces(self, leaf, s, piece):
        """(offset, bytes) of s's bytes, `piece` at a time, read with pread (a file cut
        short since opening is an error, not a crash)."""
        if s.file is None:
            view = memoryview(s.inline)
            for at in range(0, s.length, piece):
                yield at, view[at:at + piece]
            return
        fd = self._fds.get(s.file)
        if fd is None:
            raise Error(self.path, leaf.path, "the checkpoint is closed")
        for at in range(0, s.length, piece):
            n = min(piece, s.length - at)
            yield at, _read_exact(fd, n, s.offset + at, self.path, leaf.path, s.file)

    def _check_pieces(self, leaf, s, piece, sums, whole, box=None):
        where = "" if box is None else "box at %s: " % list(box.origin)
        h = xxhash.xxh3_64() if whole else None
        if sums and len(sums) != -(-s.length // piece):
            raise CorruptCheckpointError(self.path, leaf.path, "%smanifest: %d piece checksums for %d bytes"
                                         % (where, len(sums), s.length))
        for at, data in self._pieces(leaf, s, piece):
            if sums and _xxh3(data) != sums[at // piece]:
                raise ChecksumError(self.path, leaf.path, "%schecksum mismatch in bytes [%d, +%d): the leaf's bytes "
                                    "were altered or torn" % (where, at, len(data)))
            if h is not None:
                h.update(data)
        if h is not None and h.intdigest() != s.xxh3:
            raise ChecksumError(self.path, leaf.path, "%schecksum mismatch: the leaf's bytes were altered or torn" % where)

    def _check_tiles(self, leaf, b):
        """A box's tile checksums: each tile's chains xxh3 over its row segments, seeded
        with the hash so far (io/tile_checksums.hpp)."""
        elem = DTYPES[leaf.dtype][0]
        rows, row_bytes, tile_bytes, tile_rows = _format.tile_grid(b.shape, elem, b.tile_bytes, b.tile_rows)
        cols = -(-row_bytes // tile_bytes)
        s = b.stored
        for block in range(0, rows, tile_rows):
            n = min(tile_rows, rows - block)
            if s.file is None:
                data = s.inline[block * row_bytes:(block + n) * row_bytes]
            else:
                data = _read_exact(self._fds[s.file], n * row_bytes, s.offset + block * row_bytes, self.path,
                                   leaf.path, s.file)
            h = [0] * cols
            for r in range(n):
                row = data[r * row_bytes:(r + 1) * row_bytes]
                for j in range(cols):
                    h[j] = _xxh3(row[j * tile_bytes:(j + 1) * tile_bytes], h[j])
            want = b.tiles[(block // tile_rows) * cols:(block // tile_rows + 1) * cols]
            for j in range(cols):
                if h[j] != want[j]:
                    raise ChecksumError(self.path, leaf.path, "box at %s: checksum mismatch in tile (%d, %d): the "
                                        "leaf's bytes were altered or torn" % (list(b.origin), block // tile_rows, j))


def _span_bytes(stored):
    """How many distinct bytes the Stored ranges cover (overlapping ranges counted once)."""
    total, ranges = 0, {}
    for s in stored:
        if s.file is None:
            total += s.length
        else:
            ranges.setdefault(s.file, []).append((s.offset, s.offset + s.length))
    for spans in ranges.values():
        end = 0
        for a, b in sorted(spans):
            total += max(0, b - max(a, end))
            end = max(end, b)
    return total


def _need_xxhash(what):
    if xxhash is None:
        raise XxhashMissingError("", "", "%s needs the xxhash module, which is not installed "
                                 "(Debian: apt install python3-xxhash; or pip install xxhash)" % what)


def _steps_hint(path):
    """For a directory without a commit marker: a hint when it is a manager's root."""
    try:
        names = os.listdir(path)
    except OSError:
        return ""
    steps = sorted(n for n in names if n[-1:].isdigit() and os.path.isfile(os.path.join(path, n, "commit")))
    if not steps:
        return ""
    return " (it looks like a CheckpointManager root: open one of its steps, listed by ckpt.steps(root))"


def open(path):  # noqa: A001 (the documented name)
    """Opens the native checkpoint directory at `path`."""
    return Checkpoint(path)



