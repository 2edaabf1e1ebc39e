"""The `sandgate` command line (console script `sandgate = gateway.cli:main`): the parser and its handlers
(commands), `serve --workers` (workers). The only importer of the composition root, `gateway.app`."""
from gateway.cli.commands import build_parser, main

__all__ = ["build_parser", "main"]
