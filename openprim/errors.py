"""The one exception type users see: its message is the whole diagnostic line (no traceback needed)."""


class OpenPrimError(Exception):
    """A user error (bad model, bad IR, bad artifact, bad flag) or a missing tool, stated in one line."""
