"""Editing a checkpoint's manifest as a hostile or broken writer would, with a commit
marker that matches the edit (so that the reader gets past the manifest's checksum to
the fields themselves)."""

import msgpack
import xxhash


def recommit(ck_dir, manifest_bytes):
    (ck_dir / "manifest").write_bytes(manifest_bytes)
    (ck_dir / "commit").write_text("ckpt-native commit\nmanifest-bytes %d\nmanifest-xxh3 %016x\n"
                                   % (len(manifest_bytes), xxhash.xxh3_64_intdigest(manifest_bytes)))


def load(ck_dir):
    return msgpack.unpackb((ck_dir / "manifest").read_bytes(), raw=False, strict_map_key=False)


def edit(ck_dir, fn):
    """fn(manifest dict) edits the decoded manifest in place."""
    m = load(ck_dir)
    fn(m)
    recommit(ck_dir, msgpack.packb(m, use_bin_type=True))


def leaf(m, dotted_path):
    for entry in m["leaves"]:
        if isinstance(entry, dict) and ".".join(entry["path"]) == dotted_path:
            return entry
    raise KeyError(dotted_path)
