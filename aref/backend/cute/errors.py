"""The backend's user-facing error."""
from aref.errors import ArefError

DEFAULT_HINT = ("the program is valid, but the CuTe DSL backend cannot generate it yet: check it with "
                "`aref run --backend sim`, or try another partition (--partition, --consumers) or tile sizes")


class BackendError(ArefError):
    """The CuTe DSL backend cannot generate this kernel (yet); the message names what and why, the hint what
    to try instead (a general one when the raise site gives none)."""

    kind = "cute backend"

    def __init__(self, message: str, loc=None, hint: str | None = None):
        super().__init__(message, loc, hint or DEFAULT_HINT)
