"""Where output goes: results on stdout (bytes, text lines or JSON lines), talk on stderr.

With ``--json`` every result is one JSON object on its own line of stdout, errors
included, so a script reads stdout only. Without it, data (a message, a name) goes to
stdout and everything meant for people (which message, notices, progress) to stderr,
so ``zoscii fetch q > file`` keeps the file clean. ``--quiet`` silences the people part.
"""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO, TextIO


@dataclass
class Console:
    stdout: BinaryIO
    stderr: TextIO
    json: bool = False
    quiet: bool = False

    @classmethod
    def from_sys(cls, *, json: bool, quiet: bool) -> Console:
        return cls(stdout=sys.stdout.buffer, stderr=sys.stderr, json=json, quiet=quiet)

    @property
    def stderr_is_tty(self) -> bool:
        return is_terminal(self.stderr)

    def result(self, **fields: Any) -> None:
        """One JSON line (``--json`` only; callers print text themselves otherwise)."""
        self.stdout.write(json.dumps(fields, ensure_ascii=False).encode() + b"\n")
        self.stdout.flush()

    def line(self, text: str) -> None:
        self.stdout.write(text.encode() + b"\n")
        self.stdout.flush()

    def data(self, chunk: bytes) -> None:
        self.stdout.write(chunk)

    def flush(self) -> None:
        self.stdout.flush()

    def notice(self, text: str) -> None:
        """For people: which message, what happened. Off with --quiet or --json."""
        if not (self.quiet or self.json):
            self._say(text)

    def warn(self, text: str) -> None:
        """Something is wrong but the command goes on (tail -f waiting for the server)."""
        if not self.quiet:
            self._say(f"zoscii: warning: {text}")

    def error(self, text: str, *, reason: str, exit_code: int) -> None:
        if self.json:
            self.result(error=text, reason=reason, exit_code=exit_code)
        else:
            self._say(f"zoscii: error: {text}")

    def _say(self, text: str) -> None:
        self.stderr.write(text + "\n")
        self.stderr.flush()


def is_terminal(stream: object) -> bool:
    """Whether ``stream`` is a terminal (False for anything without a usable isatty)."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
