"""A reader of ckpt's native checkpoint format, in pure Python over numpy and msgpack.

    import ckpt
    ck = ckpt.open("/tmp/run/42")
    ck.paths()                       # ['step', 'params.encoder.kernel', ...]
    w = ck.read("params.encoder.kernel")   # a numpy.ndarray, memory-mapped
    ck.info("params.encoder.kernel")       # dtype, shape, nbytes, boxes
    ck.verify()                      # raises ckpt.ChecksumError on damage (needs xxhash)
    for s in ckpt.steps("/tmp/run"): # a CheckpointManager's root
        print(s.step, s.metrics)

docs/inspect.md ("Python reader") has the details; docs/format.md the format.
"""

from ._checkpoint import Checkpoint, open
from ._errors import (ChecksumError, CorruptCheckpointError, Error, MissingLeafError, NotFoundError,
                      UnsupportedError, XxhashMissingError)
from ._format import FORMAT_VERSION, Box, Leaf
from ._manager import Step, steps

__version__ = "0.1.0"

__all__ = [
    "open", "steps", "Checkpoint", "Leaf", "Box", "Step", "FORMAT_VERSION",
    "Error", "CorruptCheckpointError", "ChecksumError", "UnsupportedError", "MissingLeafError", "NotFoundError",
    "XxhashMissingError",
]
