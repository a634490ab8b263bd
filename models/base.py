"""What every config model is: a frozen, closed pydantic model whose keys in the stack file are camelCase."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


def to_camel(name: str) -> str:
    """The stack file's spelling of a field: max_model_len -> maxModelLen."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class ConfigModel(BaseModel):
    """The base of every config model (th-deploy-homelab's `LocalBaseModel`)."""

    model_config = ConfigDict(
        frozen=True,
        # Closed: an unknown key is a typo worth stopping for.
        extra="forbid",
        # camelCase keys, as Pulumi config keys usually are. The stack file's values are validated by these
        # alone (models/loader.py); the code builds models by their Python names.
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        # A YAML `.inf` or `.nan` is no size, share or timeout.
        allow_inf_nan=False,
    )


def not_true_or_false(value: Any) -> Any:
    """YAML's true and false are no number: pydantic's lax mode takes them for 1 and 0 (`port: true` would be
    port 1, `drainSeconds: false` no drain at all). Numbers written as text still pass, as `pulumi config
    set --path` writes them."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value
