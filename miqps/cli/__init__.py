"""The ``miqps`` command: the core's commands, one module each in this package, and the
commands other packages register as ``miqps.commands`` entry points (the stream processor's
``worker``, ``maps`` and ``dashboard``), all behind :func:`main`.

A command is a module (or any object) with the attributes of :class:`Command`; an entry point
names it, e.g. ``worker = "streams.cli.worker"`` under ``[project.entry-points."miqps.commands"]``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence
from importlib import import_module
from importlib.metadata import entry_points, version
from typing import Any, Protocol, cast

ENTRY_POINT_GROUP = "miqps.commands"


class Command(Protocol):
    """One ``miqps`` command: ``miqps NAME ...`` runs ``run(args)``, whose result is the exit
    code.

    ``add_arguments`` adds the command's arguments to its parser. A command with
    ``OWN_PARSER`` parses its arguments itself: ``run`` gets the rest of the command line, as
    it is, in ``args.args``, and ``add_arguments`` only describes it.
    """

    NAME: str
    HELP: str
    OWN_PARSER: bool

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


CORE_COMMANDS = ("learn", "canonicalize", "export", "report")
"""The core's commands, each the module of its name in this package, imported when needed:
``miqps canonicalize`` starts without loading what ``learn`` needs."""


def core_command(name: str) -> Command:
    return cast(Command, import_module(f"miqps.cli.{name}"))


class _Unloadable:
    """An entry point whose command cannot be imported: running it says why."""

    OWN_PARSER = True

    def __init__(self, name: str, target: str, error: ImportError) -> None:
        self.NAME = name
        self.HELP = f"cannot be loaded ({target})"
        self._message = f"miqps {name}: cannot load {target}: {error}"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def run(self, args: argparse.Namespace) -> int:
        print(self._message, file=sys.stderr)
        return 2


def registered_commands() -> list[Command]:
    """The commands of the ``miqps.commands`` entry points of the installed packages."""
    found: list[Command] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            command: Command = point.load()
        except ImportError as error:
            command = _Unloadable(point.name, point.value, error)
        found.append(command)
    return found


def all_commands() -> dict[str, Command]:
    """Every command by name: the core's first, then the registered ones (a registered
    command never replaces one of the core, nor an earlier one of the same name)."""
    commands: dict[str, Command] = {}
    for command in (*map(core_command, CORE_COMMANDS), *registered_commands()):
        commands.setdefault(command.NAME, command)
    return commands


class _Version(argparse.Action):
    """``--version``: the installed version, and which per-URL path ``canonicalize`` and
    the worker run, with why (:mod:`miqps.native`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from miqps.native import canonicalizer_path

        sys.stdout.write(f"miqps {version('miqps')}\ncanonicalizer path: {canonicalizer_path()}\n")
        parser.exit()


def build_parser(commands: Iterable[Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="miqps",
        description="Learn which URL query parameters change a page, and canonicalize URLs.",
    )
    parser.add_argument("--version", action=_Version, help="show the version and the per-URL path")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in commands:
        command.add_arguments(subparsers.add_parser(command.NAME, help=command.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in CORE_COMMANDS:  # never replaced by a registered one
        commands = {arguments[0]: core_command(arguments[0])}
    else:
        commands = all_commands()
    named = commands.get(arguments[0]) if arguments else None
    if named is not None and named.OWN_PARSER:
        # Not through argparse: it cannot hand a subcommand a REMAINDER that starts with an
        # option (``miqps worker --agents probe``).
        return named.run(argparse.Namespace(command=named.NAME, args=arguments[1:]))
    args = build_parser(commands.values()).parse_args(arguments)
    try:
        return commands[args.command].run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
