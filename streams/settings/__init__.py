"""The worker's settings, each environment variable declared once: the mechanism in
:mod:`streams.settings.fields`, the declarations in :mod:`streams.settings.model`."""

from streams.settings.fields import Env, SettingsError, Variable
from streams.settings.model import (
    DEFAULT_APP_ID,
    DEFAULT_BOOTSTRAP,
    LearningPolicy,
    Role,
    Settings,
    Topics,
    app_id_for,
    documentation_table,
    variable_at,
    variables,
)

__all__ = [
    "DEFAULT_APP_ID",
    "DEFAULT_BOOTSTRAP",
    "Env",
    "LearningPolicy",
    "Role",
    "Settings",
    "SettingsError",
    "Topics",
    "Variable",
    "app_id_for",
    "documentation_table",
    "variable_at",
    "variables",
]
