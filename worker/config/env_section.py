"""What every section of the configuration tree shares: each field names its variable, an empty variable
is an unset one, a switch is a word, and a bad value is an error that names its variable.

A section is read from the environment by `from_environment()` (tree.load_config, once per process), or
made of given values and defaults alone, with no environment read, by `from_values(...)` (the tree's
defaults, tests).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from pydantic import ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from typing_extensions import Self

# A switch is on for these words (any case); any other value, the empty one included, is off.
TRUE_WORDS = ("1", "true", "yes", "on")
# Set while from_values builds a section: its sources are then the given values alone.
_VALUES_ONLY: ContextVar[bool] = ContextVar("values_only", default=False)


class ConfigError(ValueError):
    """A variable with a value its section cannot use; the message names the variable and why."""


class EnvSection(BaseSettings):
    model_config = SettingsConfigDict(
        populate_by_name=True,  # a field's name works beside its variable's (constructors, tests)
        enable_decoding=False,  # no value is read as JSON: the sections' validators parse lists and sizes
        case_sensitive=True,  # variables are read by their exact names, as os.environ does
        frozen=True,  # read once and passed down; an override is a model_copy(update=...)
    )

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Given values, then the process's environment; no .env file, no secrets folder."""
        return (init_settings,) if _VALUES_ONLY.get() else (init_settings, env_settings)

    @model_validator(mode="before")
    @classmethod
    def _read_words(cls, data: Any) -> Any:
        """Switches out of words, and empty variables dropped (their fields keep the default)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for name, field in cls.model_fields.items():
            for key in {name, field.validation_alias}:
                value = data.get(key) if isinstance(key, str) else None
                if not isinstance(value, str):
                    continue
                if field.annotation is bool:
                    data[key] = value.strip().lower() in TRUE_WORDS
                elif value == "":
                    del data[key]
        return data

    @classmethod
    def from_values(cls, **values: Any) -> Self:
        """The section of these values (by field name) and the defaults, reading no environment."""
        token = _VALUES_ONLY.set(True)
        try:
            return cls(**values)
        finally:
            _VALUES_ONLY.reset(token)

    @classmethod
    def from_environment(cls) -> Self:
        """The section as the environment sets it; ConfigError naming each bad variable."""
        try:
            return cls()
        except ValidationError as exc:
            raise ConfigError("; ".join(_reason(error) for error in exc.errors())) from None


def _reason(error: Any) -> str:
    """A validator's own message as it wrote it (it names the variable); pydantic's, after the variable."""
    raised = error.get("ctx", {}).get("error")
    if isinstance(raised, Exception):
        return str(raised)
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}={error['input']!r}: {error['msg']}"
