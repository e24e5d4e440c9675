"""The worker's settings, each environment variable declared once: the mechanism in
:mod:`streams.settings.fields`, the declarations in :mod:`streams.settings.model`."""

from streams.settings.fields import SettingsError, Variable
from streams.settings.model import (
    LearningPolicy,
    Settings,
    Topics,
    documentation_table,
    variable_at,
    variables,
)

__all__ = [
    "LearningPolicy",
    "Settings",
    "SettingsError",
    "Topics",
    "Variable",
    "documentation_table",
    "variable_at",
    "variables",
]
