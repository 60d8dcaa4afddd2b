"""A flow's parameters refuse a key they do not know (a fleet audit, 2026-12-06).

``{"params": {"dryrun": true}}`` (for ``dry_run``) was accepted and dropped, so a requested dry run of
``drift-demotion`` ran for real and stored its reports, and ``{"forse": true}`` ran a cycle that skipped every
partition; only wrong values were refused. Every flow's parameter model now forbids unknown keys, as the config
file and the review form already did.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from flows.activation_review import ActivationReviewParams
from flows.distill_class import DistillClassParams
from flows.drift_demotion import DriftDemotionParams
from flows.promotion_cycle import PromotionCycleParams
from flows.promotion_partitions import PromotionPartitionsParams
from flows.shadow_evaluation import ShadowEvaluationParams
from tasks.backfill import BackfillParams
from tasks.quality import DataQualityParams

MODELS: list[tuple[type[BaseModel], dict[str, object]]] = [
    (PromotionCycleParams, {}),
    (PromotionPartitionsParams, {}),
    (DriftDemotionParams, {}),
    (ShadowEvaluationParams, {}),
    (BackfillParams, {}),
    (DataQualityParams, {}),
    (DistillClassParams, {"agent_id": "a", "user_id": "u", "canonical_hash": "a" * 64}),
    (ActivationReviewParams, {"skill_id": "s"}),
]


@pytest.mark.parametrize(("model", "required"), MODELS, ids=[m.__name__ for m, _ in MODELS])
def test_a_misspelt_parameter_is_refused(model: type[BaseModel], required: dict[str, object]) -> None:
    model.model_validate(required)  # the known keys alone are fine
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        model.model_validate({**required, "dryrun": True})


def test_a_deployment_run_with_a_misspelt_parameter_fails_before_it_runs(prefect_harness: None) -> None:
    from prefect.exceptions import ParameterTypeError

    from flows.drift_demotion import drift_demotion

    with pytest.raises((ParameterTypeError, ValidationError)):
        drift_demotion({"dryrun": True})  # type: ignore[arg-type]
