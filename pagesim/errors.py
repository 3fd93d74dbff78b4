"""Error types shared by every layer.

Every error a user can cause (a bad file, a bad key, an impossible configuration)
is a :class:`PagesimError`; the CLI prints its message as one line and exits 2,
never a traceback. Errors that mean pagesim itself is wrong (a broken invariant)
are :class:`InvariantError` and are allowed to surface with a traceback.
"""


class PagesimError(Exception):
    """An error caused by the user's input; its message is actionable on its own."""


class ConfigError(PagesimError, ValueError):
    """A configuration that cannot be run: unknown key or name, wrong type, impossible sizes."""


class DataError(PagesimError, ValueError):
    """An input data file that cannot be read: missing, malformed, or with invalid values.

    The message names the file and, where it applies, the record or line.
    """


class AllocatorError(PagesimError, RuntimeError):
    """An allocator was asked to do something impossible (free an unknown sequence, double free)."""


class InvariantError(AssertionError):
    """pagesim's own bookkeeping is inconsistent: a bug, not a user error."""
