"""The ``partialcow`` command: inspect Parquet files, check the machine, verify and rebuild row indexes.

Each subcommand is one function of the layer it inspects (``parquet.inspect``, ``spark.doctor``) or a module of this
package when it drives several layers (``cli.index``: the index, over a Spark session); this module only parses
arguments and renders errors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import traceback
from collections.abc import Sequence

from partialcow.exceptions import PartialCowError

__all__ = ["emit", "main"]

# subcommand -> (module, function, help); the function takes the parsed arguments and returns an exit code.
_COMMANDS = {
    "inspect": ("partialcow.parquet.inspect", "run", "print row groups, column chunks and pages of a Parquet file"),
    "doctor": ("partialcow.spark.doctor", "run", "show Java, Spark, Iceberg, Delta and the dbt project's warehouse"),
    "index": ("partialcow.cli.index", "run", "verify or rebuild a table's row-level index"),
}


_EXAMPLES = """examples:
  partialcow inspect warehouse/shop.db/customers/data/00000-0-....parquet
  partialcow doctor                      # the dbt project around this folder (its profile's warehouse)
  partialcow doctor --probe              # ... and start Spark once: create, write and drop a table
  partialcow index verify shop.customers --project-dir models_example
  partialcow index rebuild /data/events --key event_id   # a Delta table by folder

exit status: 0 done (the index agrees with the table), 1 the index disagrees with the table (index verify) or the
machine cannot run partialcow (doctor), 2 an error (the message says what to change)
"""


def plain(text: str) -> str:
    """A docstring line as terminal text: reStructuredText's double backquotes removed.

    >>> plain("The ``partialcow`` command: inspect ``*.parquet`` files")
    'The partialcow command: inspect *.parquet files'
    """
    return re.sub(r"``([^`]+)``", r"\1", text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="partialcow", description=plain(__doc__.splitlines()[0]), epilog=_EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="{inspect,doctor,index}")
    for name, (module, _, help_text) in _COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments = getattr(importlib.import_module(module), "add_arguments", None)
        if add_arguments is not None:
            add_arguments(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    module, function, _ = _COMMANDS[args.command]
    try:
        return int(getattr(importlib.import_module(module), function)(args) or 0)
    except PartialCowError as exc:
        # 2, not 1: a script that rebuilds an index when `index verify` exits 1 must not do so on a typo
        print(f"partialcow {args.command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of our output had what it wanted (`| head`); commands whose exit status says more than
        # "done" write through `emit`, which keeps it
        _silence_stdout()
        return 0
    except Exception:  # noqa: BLE001 - not one of ours: its traceback is the report, and 1 would read as "disagrees"
        traceback.print_exc()
        return 2


def emit(text: str) -> None:
    """Print ``text`` to stdout; a reader that went away (`| head`) ends the output, not the command."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    # nothing more is written (the interpreter's own flush of stdout at exit would fail again)
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
