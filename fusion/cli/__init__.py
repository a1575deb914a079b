"""L10 the command line: parser.py (arguments only; fusion.docs reads it) and commands.py (handlers; imports anything)."""

from .commands import main

__all__ = ["main"]
