"""What every API model shares: camelCase on the wire, unknown fields refused, CEL rules spelled one way."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def cel(rule: str, message: str, **extra: Any) -> dict[str, Any]:
    """An x-kubernetes-validations entry: checked by the API server at apply time."""
    return {"rule": rule, "message": message, **extra}
