"""ckpt.steps(root): the committed steps of a CheckpointManager's root and what the
manager stored with each (include/ckpt/manager/step_metadata.hpp, docs/manager.md)."""

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from ._checkpoint import Checkpoint, _open_regular, _read_exact
from ._errors import CorruptCheckpointError, MissingLeafError, NotFoundError

STEP_METADATA = "_CHECKPOINT_METADATA"
MAX_STEP_METADATA_BYTES = 64 << 20


@dataclass
class Step:
    """One committed step. `metrics` maps names to floats (the manager stores no NaN or
    infinity); times are seconds since the Unix epoch (`time` is when save() was called,
    or the directory's modification time for a step saved without metadata). `finite` is
    False for a step the manager's guard_non_finite found NaN or infinities in (its
    counts are in `save_stats`); a step saved without the guard counts as finite."""

    step: int
    path: str
    metrics: Dict[str, float] = field(default_factory=dict)
    time: Optional[float] = None
    commit_time: Optional[float] = None
    format: str = ""
    custom_metadata: Any = None
    items: Dict[str, str] = field(default_factory=dict)
    save_stats: Optional[Dict[str, Any]] = None
    finite: bool = True

    def open(self):
        """The step's state checkpoint."""
        return Checkpoint(self.path)

    def item(self, name):
        """An item saved beside the state: a tree item as a Checkpoint, a JSON item as
        its parsed value."""
        kind = self.items.get(name)
        if kind == "tree":
            return Checkpoint(os.path.join(self.path, "items", name))
        if kind == "json":
            return _read_json(os.path.join(self.path, "items", name + ".json"), self.path, name + ".json")
        raise MissingLeafError(self.path, "", "no item %r (items: %s)" % (name, ", ".join(sorted(self.items)) or "none"))


def _read_json(file, where, name):
    fd = _open_regular(file, where, name)
    if fd is None:
        raise CorruptCheckpointError(where, "", "%s is missing" % name)
    try:
        size = os.fstat(fd).st_size
        if size > MAX_STEP_METADATA_BYTES:
            raise CorruptCheckpointError(where, "", "%s is %d bytes, more than the %d allowed"
                                         % (name, size, MAX_STEP_METADATA_BYTES))
        data = _read_exact(fd, size, 0, where, "", name)
    finally:
        os.close(fd)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise CorruptCheckpointError(where, "", "%s is not valid JSON: %s" % (name, str(e)[:200])) from None


def _int(j, key, where):
    v = j.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise CorruptCheckpointError(where, "", "%s is not valid step metadata: %r is not an integer" % (STEP_METADATA, key))
    return int(v)


def _load(step, path):
    s = Step(step=step, path=path)
    if not os.path.exists(os.path.join(path, STEP_METADATA)):  # saved by plain ckpt::save
        s.time = os.stat(path).st_mtime
        return s
    j = _read_json(os.path.join(path, STEP_METADATA), path, STEP_METADATA)
    if not isinstance(j, dict):
        raise CorruptCheckpointError(path, "", "%s is not valid step metadata: not a JSON object" % STEP_METADATA)
    init, commit = _int(j, "init_timestamp_nsecs", path), _int(j, "commit_timestamp_nsecs", path)
    s.time = init / 1e9 if init else os.stat(path).st_mtime
    s.commit_time = commit / 1e9 if commit else None
    s.format = j.get("format", "") if isinstance(j.get("format"), str) else ""
    metrics = j.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise CorruptCheckpointError(path, "", "%s is not valid step metadata: metrics is not an object" % STEP_METADATA)
    s.metrics = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    s.custom_metadata = j.get("custom_metadata")
    items = j.get("items") or {}
    if not isinstance(items, dict) or not all(isinstance(v, str) for v in items.values()):
        raise CorruptCheckpointError(path, "", "%s is not valid step metadata: items is not an object of strings"
                                     % STEP_METADATA)
    s.items = dict(items)
    s.save_stats = j.get("save_stats") if isinstance(j.get("save_stats"), dict) else None
    s.finite = j.get("finite") is not False
    return s


def _step_number(name, prefix):
    if prefix is None:  # the trailing digits, as `ckpt ls` reads a root written by anything
        digits = name[len(name.rstrip("0123456789")):]
    else:
        if not name.startswith(prefix):
            return None
        digits = name[len(prefix):]
    if not digits or not digits.isascii() or not digits.isdigit() or len(digits) > 19:
        return None
    n = int(digits)
    return n if n < 1 << 63 else None


def steps(root, prefix=None):
    """The committed native steps of a CheckpointManager's root, ascending, as Step
    objects (step number, path, metrics, times, custom metadata, items, save figures).

    A step is a directory named <prefix><digits> holding a commit marker; `prefix` is
    the manager's step_prefix, or None to take any name's trailing digits. Staging
    directories (.tmp-*) and steps without a commit marker (interrupted saves) are not
    steps."""
    root = os.fspath(root)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        raise NotFoundError(root, "", "no such manager root") from None
    except NotADirectoryError:
        raise NotFoundError(root, "", "not a directory") from None
    found = {}
    for name in names:
        if name.startswith("."):
            continue
        n = _step_number(name, prefix)
        path = os.path.join(root, name)
        if n is None or not os.path.isfile(os.path.join(path, "commit")) or os.path.islink(path):
            continue
        # Two spellings of one step (another fixed length): the one without leading zeros wins.
        if n in found and name != str(n)[-len(name):]:
            continue
        found[n] = path
    return [_load(n, found[n]) for n in sorted(found)]
