"""The `polyinfer` command line: one module per pipeline stage, each thin over its package."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer
from rich.console import Console

from polyinfer.errors import PolyinferError

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Continuous compilation of inference.")
err = Console(stderr=True)



def main() -> None:
    """Entry point: user errors become one clear line on stderr and exit status 2, not a traceback."""
    # Each module of this package registers its commands on `app` when imported.
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    try:
        app()
    except PolyinferError as e:
        err.print(f"[bold red]error:[/] {e}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
