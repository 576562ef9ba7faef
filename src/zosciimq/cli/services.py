"""run: a service's one-shot mode (``python -m zoscii_<svc> --once ...``) from the CLI.

The services are separate packages (services/<svc>/, each with its own dependencies):
they are run when importable here, installed or on PYTHONPATH. The child gets the
same interpreter and finds the package where this process found it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import zosciimq
from zosciimq.cli import exit_codes
from zosciimq.cli.context import CliError, Context

SERVICES = ("replikate", "claireup", "statissa")


def run_service(ctx: Context) -> int:
    """The service's own exit code is the result (see its --help)."""
    service = ctx.args.service
    module = f"zoscii_{service}"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        raise CliError(
            f"the {service} service ({module}) is not installed here: "
            f"pip install ./services/{service}, or put services/{service} on PYTHONPATH",
            exit_codes.ERROR,
            "not_installed",
        )
    extra = list(ctx.args.service_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    command = [sys.executable, "-m", module, "--once", *extra]
    ctx.console.flush()
    env = _child_env(ctx, Path(spec.origin))
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE)
    output = process.stdout
    assert output is not None
    try:  # relayed, not inherited: stdout is whatever this process's console writes to
        for chunk in iter(lambda: os.read(output.fileno(), 1 << 16), b""):
            ctx.console.data(chunk)
            ctx.console.flush()
    finally:
        code = process.wait()
    return code


def _child_env(ctx: Context, origin: Path) -> dict[str, str]:
    """PYTHONPATH with the directories this process found the service and zosciimq in."""
    roots = [str(origin.parent.parent), str(Path(zosciimq.__file__).parent.parent)]
    existing = ctx.env.get("PYTHONPATH", "")
    return {**ctx.env, "PYTHONPATH": os.pathsep.join([*roots, *filter(None, [existing])])}
