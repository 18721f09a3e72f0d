"""The version of scratchformer, apart so that any module can name it (a run directory
records the version that wrote it)."""

__version__ = "0.1.0"
