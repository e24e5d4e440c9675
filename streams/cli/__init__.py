"""The stream processor's ``miqps`` commands, one module each: :mod:`.worker`, :mod:`.maps`
and :mod:`.dashboard`, registered as ``miqps.commands`` entry points (pyproject.toml) that
:func:`miqps.cli.main` finds; :mod:`.common` holds what they share.

Importing a command needs no Kafka package, so that ``miqps --help`` works without the
``streams`` extra: each command imports the extra when it runs, and says when it is missing.
"""
