"""The project's own exceptions, apart from everything so that the command line can tell
them without importing what raises them."""


class UsageError(ValueError):
    """A mistake in how a command was called."""


class TrainingError(RuntimeError):
    """Training cannot go on, e.g. the loss is no longer a finite number."""
