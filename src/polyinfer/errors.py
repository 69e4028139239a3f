"""User-facing errors.

Anything raised as a `PolyinferError` is a problem with the user's input or environment; the CLI prints
its message and exits non-zero instead of showing a traceback.
"""


class PolyinferError(Exception):
    """A problem the user can fix; the message says what and, where possible, how."""


class ModelError(PolyinferError):
    """The model could not be understood or loaded."""


class RequestError(PolyinferError):
    """A generation request is invalid for this model or engine."""


class CandidateError(PolyinferError):
    """A candidate failed to import, build, run or return valid output."""


class ReviewError(PolyinferError):
    """An artifact is missing, or a review action is not allowed for it (state, verification, staleness)."""


class BoardError(PolyinferError):
    """The board (experiment store) cannot be opened, or a write would break a study's record."""
