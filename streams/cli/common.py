"""What the stream commands share: their options for settings (each overriding its
environment variable), the settings they make, and the check that the ``streams`` extra is
installed. Importing it needs no Kafka package."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Literal, get_args, get_origin

from streams.settings import Settings, SettingsError, Topics, variable_at, variables


def extra_missing(command: str, *modules: str) -> bool:
    """Whether a module of the ``streams`` extra that ``miqps COMMAND`` needs cannot be
    imported; if so, says so on stderr (the command then exits 2)."""
    try:
        for module in modules:
            importlib.import_module(module)
    except ImportError as error:
        print(
            f"miqps {command}: the stream processor is not installed ({error}); "
            "install the 'streams' extra",
            file=sys.stderr,
        )
        return True
    return False


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """The options every stream command takes: the broker and the topics' prefix."""
    add_setting_option(parser, ("bootstrap_servers",), "HOST:PORT[,...]")
    parser.add_argument(
        "--topic-prefix", metavar="PREFIX", help=f"{Topics.PREFIX.help} ({Topics.PREFIX.name})"
    )


def add_setting_option(
    parser: argparse.ArgumentParser, path: tuple[str, ...], metavar: str | None
) -> None:
    """``--name`` for the setting at ``path``, overriding its environment variable."""
    variable = variable_at(*path)
    option = "--" + path[-1].replace("_", "-")
    default = variable.format(variable.default) if variable.default is not None else "unset"
    help = f"{variable.env.help} ({variable.name}, default {default})"
    if variable.annotation is bool:
        parser.add_argument(
            option, action="store_true", default=None, dest=".".join(path), help=help
        )
        return

    def convert(text: str) -> Any:
        try:
            return variable.convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None

    choices = get_args(variable.annotation) if get_origin(variable.annotation) is Literal else None
    parser.add_argument(
        option, type=convert, dest=".".join(path), metavar=metavar, choices=choices, help=help
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment with the options given on the command line; a bad
    value in the environment ends the command with a message naming the variable."""
    env = dict(os.environ)
    if args.topic_prefix is not None:
        env[Topics.PREFIX.name] = args.topic_prefix
    try:
        settings = Settings.from_env(env)
    except SettingsError as error:
        print(f"miqps: bad setting: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    paths = {".".join(variable.path): variable.path for variable in variables()}
    return settings.with_values(
        {
            paths[dest]: value
            for dest, value in vars(args).items()
            if value is not None and dest in paths
        }
    )
