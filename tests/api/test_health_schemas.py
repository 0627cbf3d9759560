"""The public health shapes are declared twice on purpose: the fleet service's
dataclasses are its results, the API's pydantic models the contract the CLI
parses without importing the server. This keeps the two in step, field by field."""

import dataclasses
import typing

import pytest
from pydantic import BaseModel

from gpudock.api import health_schemas
from gpudock.services.fleet import gpu_health, reliability

PAIRS = [
    (gpu_health.FaultView, health_schemas.FaultPublic),
    (reliability.GpuReliability, health_schemas.GpuReliabilityPublic),
    (reliability.ModelReliability, health_schemas.ModelReliabilityPublic),
    (reliability.ReliabilityReport, health_schemas.ReliabilityPublic),
]


def _public_name(annotation: object) -> str:
    """A field's type, with each service class named as the API class it becomes."""
    text = str(annotation)
    for service_class, public_class in PAIRS:
        text = text.replace(
            f"{service_class.__module__}.{service_class.__qualname__}",
            f"{public_class.__module__}.{public_class.__qualname__}",
        )
    return text.replace("typing.", "").replace("NoneType", "None")


@pytest.mark.parametrize(("result", "public"), PAIRS, ids=[p.__name__ for _, p in PAIRS])
def test_the_public_shape_has_the_service_results_fields_and_types(
    result: type, public: type[BaseModel]
) -> None:
    result_types = typing.get_type_hints(result)
    public_types = typing.get_type_hints(public)
    assert [f.name for f in dataclasses.fields(result)] == list(public.model_fields)
    for name in public.model_fields:
        assert _public_name(result_types[name]) == _public_name(public_types[name]), name
