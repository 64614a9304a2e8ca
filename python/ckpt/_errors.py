"""The reader's exceptions: every failure is a ckpt.Error naming the checkpoint and,
where there is one, the leaf, as the C++ library's errors do
("/tmp/run/3: params.encoder.kernel: checksum mismatch ...")."""


class Error(Exception):
    """Base of every error the reader raises."""

    def __init__(self, checkpoint="", path="", what=""):
        self.checkpoint = str(checkpoint)
        self.path = path
        self.what = what
        super().__init__(self._message())

    def _message(self):
        return ": ".join(p for p in (self.checkpoint, self.path, self.what) if p)

    def __str__(self):  # KeyError, a base of MissingLeafError, would quote the message
        return self._message()


class CorruptCheckpointError(Error):
    """The files are not a whole, well-formed native checkpoint (truncated, altered,
    torn by an interrupted save, hostile)."""


class ChecksumError(CorruptCheckpointError):
    """A leaf's bytes (or the manifest's) do not hash to what was recorded."""


class UnsupportedError(Error):
    """A well-formed checkpoint using something this reader does not read: a newer
    format version, a codec other than raw, a dtype numpy cannot hold."""


class MissingLeafError(Error, KeyError):
    """No leaf of that path in the checkpoint."""


class NotFoundError(Error, FileNotFoundError):
    """No checkpoint, or no manager root, at that path."""


class XxhashMissingError(Error):
    """Checksums need the xxhash module (Debian: python3-xxhash)."""
