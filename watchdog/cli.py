"""The ``watchdog`` command: ``serve``, ``runs``, ``report`` (and, as they land, ``rules`` and
``demo``). Errors are one line on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from dataclasses import fields

from watchdog import __version__
from watchdog.config import Config, load
from watchdog.errors import WatchdogError


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML configuration file")
    for f in fields(Config):
        flag = "--" + f.name.replace("_", "-")
        if f.name == "insecure":
            parser.add_argument(flag, action="store_true", default=None,
                                help="allow non-loopback binds without an api_token")
        elif f.name in ("rules",):
            parser.add_argument(flag, action="append", default=None, metavar="PATH",
                                help="rule file or directory (repeatable)")
        elif f.name == "webhooks":
            continue  # structured: config file or WATCHDOG_WEBHOOKS (YAML) only
        else:
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper(),
                                help=f"overrides {f.name} (env WATCHDOG_{f.name.upper()})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="watchdog",
        description="Watch LLM agents through their OpenTelemetry spans; tell stuck ones to stop.")
    parser.add_argument("--version", action="version", version=f"agent-watchdog {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the sidecar")
    _add_config_flags(serve)
    serve.set_defaults(handler=_serve)
    return parser


def _config_from(args: argparse.Namespace) -> Config:
    flags = {f.name: getattr(args, f.name, None) for f in fields(Config)}
    if flags.get("rules"):
        flags["rules"] = tuple(flags["rules"])
    return load(getattr(args, "config", None), flags=flags)


def _serve(args: argparse.Namespace) -> int:
    config = _config_from(args)
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from watchdog.server import serve  # the server's dependencies load only when serving

    asyncio.run(serve(config))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except WatchdogError as exc:
        print(f"watchdog: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
