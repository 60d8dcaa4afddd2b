"""Flow parameter forms: an unset tenant id means every tenant, whatever the caller sends."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from flows.drift_demotion import DriftDemotionParams
from flows.promotion_cycle import PromotionCycleParams
from tasks.backfill import BackfillParams


@pytest.mark.parametrize("model", [PromotionCycleParams, DriftDemotionParams, BackfillParams])
def test_none_and_empty_tenant_ids_mean_every_tenant(model: type[BaseModel]) -> None:
    fields = [f for f in ("agent_id", "user_id") if f in model.model_fields]
    assert fields
    for value in (None, ""):
        params = model.model_validate(dict.fromkeys(fields, value))
        assert all(getattr(params, f) == "" for f in fields)
    schema = model.model_json_schema()["properties"]
    assert all(schema[f].get("type") == "string" and "anyOf" not in schema[f] for f in fields)  # a plain text box
