"""The one exception type users see: its message is the whole diagnostic line (no traceback needed)."""
import re


class OpenPrimError(Exception):
    """A user error (bad model, bad IR, bad artifact, bad flag) or a missing tool, stated in one line."""


def one_line(e: OpenPrimError, tool: str) -> str:
    """The error as `file:line[:col]: error: ...`, or `tool: error: ...` when it has no location."""
    msg = str(e)
    return msg if re.match(r"^\S+?:\d+(:\d+)?: error: ", msg) else f"{tool}: error: {msg}"
