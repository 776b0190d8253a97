"""The one exception type that the CLI turns into a single line on stderr and a non-zero exit."""


class JumpLoRAError(Exception):
    """Bad input or configuration: the message says what is wrong and how to fix it."""
