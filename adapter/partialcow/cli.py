"""The ``partialcow`` command: inspect Parquet files, check the machine, verify and rebuild row indexes.

Each subcommand lives with its layer; this module only parses arguments and renders errors.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from partialcow.exceptions import PartialCowError

__all__ = ["main"]

# subcommand -> (module, function, help); the function takes the parsed arguments and returns an exit code.
_COMMANDS = {
    "inspect": ("partialcow.parquet.inspect", "run", "print row groups, column chunks and pages of a Parquet file"),
    "doctor": ("partialcow.spark.doctor", "run", "show Java, Spark, Iceberg and Delta on this machine"),
    "index": ("partialcow.index.cli", "run", "verify or rebuild a table's row-level index"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="partialcow", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, _, help_text) in _COMMANDS.items():
        command = sub.add_parser(name, help=help_text)
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
        print(f"partialcow {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
