"""The `dflash-operator` command: one subcommand per job the operator does for people and for CI."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dflash_operator import __version__

# Subcommands that later issues fill in; until then they say so and fail, rather than pretend to work.
_PLANNED = {
    "run": "run the operator against the current kubeconfig",
    "render": "print the objects the operator would create for a DFlashDeployment (-f CR.yaml)",
    "check-pair": "check that a draft model fits a target model (TARGET_DIR DRAFT_DIR)",
    "crd": "write the CustomResourceDefinition generated from the API models",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dflash-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in _PLANNED.items():
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    print(f"dflash-operator {args.command}: not implemented yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
