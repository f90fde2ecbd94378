"""The `headsup` entry point."""

from __future__ import annotations

import sys

from simple_parsing import ArgumentParser, DashVariant

from ._registry import COMMANDS


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="headsup", description="Attention-head masks and functional pathways.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, cmd in sorted(COMMANDS.items()):
        child = sub.add_parser(
            name, help=cmd.help, description=cmd.help,
            add_option_string_dash_variants=DashVariant.DASH,  # --data-dir, as in the experiment scripts
        )
        child.add_arguments(cmd.config, dest="config")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[args.command].run(args.config)
    except (ValueError, FileNotFoundError) as error:
        print(f"headsup {args.command}: error: {error}", file=sys.stderr)
        return 2
    return int(code or 0)
