"""What every command gets: its arguments, the console and (built on first use) a client."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import BinaryIO

from zosciimq import __version__
from zosciimq.cli.console import Console
from zosciimq.cli.progress import BatchBar, NoBatchBar, NoProgress, ProgressBar
from zosciimq.client import TransportOptions, ZosciiClient

DEFAULT_URL = "http://localhost:8080/"


class CliError(Exception):
    """A failure the CLI itself detects, with the exit code it means."""

    def __init__(self, text: str, exit_code: int, reason: str = "error") -> None:
        super().__init__(text)
        self.exit_code = exit_code
        self.reason = reason


@dataclass
class Context:
    args: argparse.Namespace
    console: Console
    stdin: BinaryIO
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    _client: ZosciiClient | None = None

    @property
    def url(self) -> str:
        return self.args.url or self.env.get("ZOSCII_URL") or DEFAULT_URL

    @property
    def client(self) -> ZosciiClient:
        if self._client is None:
            self._client = build_client(self.args, self.url, self.env)
        return self._client

    def progress(self, label: str) -> ProgressBar | NoProgress:
        """A bar for one transfer (it draws only once the size passes the threshold)."""
        if self.console.quiet or not self.console.stderr_is_tty:
            return NoProgress()
        return ProgressBar(self.console.stderr, label)

    def batch_progress(
        self, label: str, *, total_messages: int | None, total_bytes: int | None
    ) -> BatchBar | NoBatchBar:
        """A bar for a batch publish (it draws only once the batch has run a second)."""
        if self.console.quiet or not self.console.stderr_is_tty:
            return NoBatchBar()
        return BatchBar(
            self.console.stderr, label, total_messages=total_messages, total_bytes=total_bytes
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


def build_client(args: argparse.Namespace, url: str, env: Mapping[str, str]) -> ZosciiClient:
    """--timeout bounds each wait for the server; a long transfer as a whole is not cut."""
    options = TransportOptions(
        connect_timeout=min(args.timeout, 10.0),
        read_timeout=args.timeout,
        deadline=None,
        retries=args.retries,
        user_agent=f"zoscii-cli/{__version__}",
    )
    token = args.token or env.get("ZOSCII_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else None
    return ZosciiClient(
        url, mode="original" if args.original else "default", options=options, headers=headers
    )
