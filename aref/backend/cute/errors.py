"""The backend's user-facing error."""
from aref.errors import ArefError


class BackendError(ArefError):
    """The CuTe DSL backend cannot generate this kernel (yet); the message names what and why."""

    kind = "cute backend"
