"""What every config model is: a frozen standard data class, validated by pydantic from the stack file's values.

Why not pydantic's BaseModel: a model class of pydantic builds its validator when its module is imported,
and every run of the program imports every model. That was pydantic's import (~25 ms) and the classes'
validators (~35 ms) in each run, and a no-op `pulumi up` runs the program twice: 0.08x of the empty
program's `up` (bench/config_import.py measured it; issue 23's bound is 1.2x). Data classes cost a few
ms to make, and pydantic builds their validator only when a config is validated, which a run does only
when the config or this code changed (controller/validated_config.py keeps the last one validated).

The rules are still pydantic's, written once on the fields: `Limits(...)` for its constraints (ge, le, gt,
pattern, max_length, min_length: what `Field(...)` took; a bounded field is a `Number`, which refuses true
and false) and `After(function)` for a check or a normalization (what `AfterValidator` took); a rule
across a model's fields is its `__post_init__`, which pydantic calls after the fields' validation and a
constructor call in the code calls too. A model built
in the code from validated parts (`ResolvedDeployment`, `dataclasses.replace`) runs its `__post_init__`
and no field rule.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, TypeAdapter
    from pydantic_core import CoreSchema

Model = TypeVar("Model")


def to_camel(name: str) -> str:
    """The stack file's spelling of a field: max_model_len -> maxModelLen."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


class ConfigModel:
    """The base of every config model; each is also `@dataclass(frozen=True, kw_only=True)`."""

    # Read by pydantic when it validates a subclass: closed (an unknown key is refused), camelCase keys as
    # Pulumi config keys usually are, and a YAML `.inf` or `.nan` is no size, share or timeout.
    __pydantic_config__: ClassVar[Mapping[str, Any]] = {
        "extra": "forbid",
        "alias_generator": to_camel,
        "allow_inf_nan": False,
    }


def _not_true_or_false(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    return value


def _a_number(schema: CoreSchema) -> CoreSchema:
    from pydantic_core import core_schema

    return core_schema.no_info_before_validator_function(_not_true_or_false, schema)


@dataclasses.dataclass(frozen=True)
class Number:
    """A number field refuses YAML's true and false, which pydantic's lax mode takes for 1 and 0 (`port: true`
    would be port 1, `drainSeconds: false` no drain at all); numbers written as text still pass, as
    `pulumi config set --path` writes them. `Limits` with a bound (ge, le, gt) is a Number too."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return _a_number(handler(source))


@dataclasses.dataclass(frozen=True)
class Limits:
    """Constraints of a field's value, pydantic's core-schema keys: `Limits(ge=1, le=64)`, `Limits(pattern=...)`.
    A bound (ge, le, gt) makes the field a `Number`."""

    ge: float | None = None
    le: float | None = None
    gt: float | None = None
    pattern: str | None = None
    max_length: int | None = None
    min_length: int | None = None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        constraints = {key: value for key, value in dataclasses.asdict(self).items() if value is not None}
        schema: CoreSchema = {**handler(source), **constraints}
        return _a_number(schema) if constraints.keys() & {"ge", "le", "gt"} else schema


@dataclasses.dataclass(frozen=True)
class After:
    """A check (or a normalization) of a field's value after its type's: a ValueError is the error's message."""

    function: Callable[[Any], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.function, handler(source))


# One validator per model, built by pydantic at its first use in a run.
_VALIDATORS: dict[type[Any], TypeAdapter[Any]] = {}


def validate(model: type[Model], data: Any) -> Model:
    """`data` as the stack file writes it (camelCase keys) validated into `model`; pydantic's
    ValidationError when it is not (models/loader.py says it in the stack file's terms)."""
    from pydantic import TypeAdapter

    validator = _VALIDATORS.get(model)
    if validator is None:
        validator = _VALIDATORS[model] = TypeAdapter(model)
    # By the stack file's camelCase keys alone: the models' Python names are for the code that builds them.
    validated: Model = validator.validate_python(data, by_alias=True, by_name=False)
    return validated


def plain(value: Any, by_alias: bool = False) -> Any:
    """A model as JSON data: what pydantic's `model_dump(mode="json")` gave (field names, enum values, lists
    for tuples), so that what is hashed from it (a launch's rendezvous port, the survey's key) stays the same."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            (to_camel(field.name) if by_alias else field.name): plain(getattr(value, field.name), by_alias)
            for field in dataclasses.fields(value)
        }
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [plain(item, by_alias) for item in value]
    if isinstance(value, Mapping):
        return {key: plain(item, by_alias) for key, item in value.items()}
    return value
