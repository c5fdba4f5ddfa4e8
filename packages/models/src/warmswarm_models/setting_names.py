"""How both services name an environment variable when they refuse a setting at start-up."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel


def setting_name(settings: type[BaseModel], env_prefix: str, loc: str) -> str:
    """The variable(s) an operator sets, for error lines: 'DIRECTOR_OPS_TOKEN (or OPS_TOKEN)'.

    `loc` is what pydantic reports: the field's name, or its first alias when it has aliases.
    """
    for name, info in settings.model_fields.items():
        alias = info.validation_alias
        choices = [str(c) for c in alias.choices] if isinstance(alias, AliasChoices) else []
        if loc == name or loc in choices:
            if len(choices) > 1:
                return f"{choices[0]} (or {' or '.join(choices[1:])})"
            if choices:
                return choices[0]
            return f"{env_prefix}{name.upper()}"
    return loc or "settings"
