"""``python -m streams.settings``: the settings table of docs/STREAMS.md."""

from streams.settings.model import documentation_table

print(documentation_table())
