"""Errors the core raises; the HTTP layer maps each class to a status code."""


class ZosciiError(Exception):
    """Base class: ``str(error)`` is the text that goes into the envelope's ``error``."""


class InvalidInput(ZosciiError):
    """A parameter that the protocol would have to guess at (PROTOCOL.md 3, cleaning)."""


class QueueNotFound(ZosciiError):
    """fetch on a queue directory that does not exist."""


class MessageNotFound(ZosciiError):
    """retrieve of a store name whose file does not exist."""


class TooLarge(ZosciiError):
    """A message over the configured maximum size."""


class TryAgain(ZosciiError):
    """A transient limit (more than 10,000 names in one second on one queue)."""


class StorageFull(ZosciiError):
    """The volume has no space left; nothing was kept."""
