"""Which config file is read, and that a configured one cannot silently vanish (docs/guide/ops.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from skillflow.kernel.config import (
    ConfigError,
    PromotionConfig,
    Settings,
    config_path,
    load_promotion_config,
    load_schedules,
)

TOML = '[promotion]\nrequire_shadow = true\nmin_executions = 7\n[schedules]\npromotion-cycle = "*/5 * * * *"\n'


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("SKILLFLOW_CONFIG_PATH", "SKILLFLOW_HOME"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def project(root: Path) -> Path:
    (root / "config").mkdir(parents=True)
    (root / "config" / "skillflow.toml").write_text(TOML)
    return root / "config" / "skillflow.toml"


def test_a_configured_path_that_is_missing_is_an_error_naming_it(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    clean.chdir(tmp_path)
    missing = tmp_path / "typo" / "skillflow.toml"
    clean.setenv("SKILLFLOW_CONFIG_PATH", str(missing))
    with pytest.raises(ConfigError, match=str(missing)):
        load_promotion_config()
    with pytest.raises(ConfigError, match="SKILLFLOW_CONFIG_PATH"):
        load_schedules()
    clean.delenv("SKILLFLOW_CONFIG_PATH")
    clean.setenv("SKILLFLOW_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="SKILLFLOW_HOME"):
        load_promotion_config()


def test_without_a_file_the_config_says_it_is_the_defaults(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    clean.chdir(tmp_path)
    cfg = load_promotion_config()
    assert cfg.source == "defaults" and cfg.require_shadow is False
    assert config_path() is None and load_schedules() == {}
    assert cfg.merged({"min_executions": 2}).source == "defaults"


def test_the_nearest_project_config_is_found_from_a_subfolder(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    path = project(tmp_path / "repo")
    deep = tmp_path / "repo" / "src" / "pkg"
    deep.mkdir(parents=True)
    clean.chdir(deep)
    cfg = load_promotion_config()
    assert cfg.source == str(path) and cfg.require_shadow is True and cfg.min_executions == 7
    assert load_schedules() == {"promotion-cycle": "*/5 * * * *"}


def test_skillflow_home_wins_over_the_current_folder(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    home = project(tmp_path / "home")
    (tmp_path / "elsewhere").mkdir()
    clean.chdir(tmp_path / "elsewhere")
    clean.setenv("SKILLFLOW_HOME", str(tmp_path / "home"))
    assert load_promotion_config().source == str(home)
    explicit = tmp_path / "explicit.toml"
    explicit.write_text("[promotion]\nmin_executions = 3\n")
    clean.setenv("SKILLFLOW_CONFIG_PATH", str(explicit))  # the explicit file wins over the home
    cfg = load_promotion_config()
    assert cfg.source == str(explicit) and cfg.min_executions == 3 and cfg.require_shadow is False


def test_precedence_arguments_environment_file_defaults(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    path = project(tmp_path)
    clean.setenv("SKILLFLOW_PROMOTION__MIN_EXECUTIONS", "9")
    clean.setenv("SKILLFLOW_PROMOTION__NOOP_TOOLS", '["think", "plan"]')
    cfg = load_promotion_config(path)
    assert (cfg.min_executions, cfg.require_shadow, cfg.max_promotions_per_cycle) == (9, True, 3)
    assert cfg.noop_tools == ("think", "plan")
    cfg = load_promotion_config(path, {"min_executions": 4})
    assert cfg.min_executions == 4 and cfg.require_shadow is True


def test_environment_problems_name_the_variable(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    path = project(tmp_path)
    clean.setenv("SKILLFLOW_PROMOTION__MIN_EXECUTONS", "3")
    with pytest.raises(ValidationError) as typo:
        load_promotion_config(path)
    assert typo.value.__notes__ == [
        "promotion.min_executons (environment variable SKILLFLOW_PROMOTION__MIN_EXECUTONS): unknown setting"
    ]
    clean.delenv("SKILLFLOW_PROMOTION__MIN_EXECUTONS")
    clean.setenv("SKILLFLOW_PROMOTION__MIN_SUCCESS_RATE", "2.5")  # out of bounds
    with pytest.raises(ValidationError) as bad:
        load_promotion_config(path)
    assert "SKILLFLOW_PROMOTION__MIN_SUCCESS_RATE" in bad.value.__notes__[0]


def test_file_problems_name_the_file(tmp_path: Path, clean: pytest.MonkeyPatch) -> None:
    path = tmp_path / "skillflow.toml"
    path.write_text("[promotion]\nmin_sucess_rate = 0.5\n")
    with pytest.raises(ValidationError) as typo:
        load_promotion_config(path)
    assert typo.value.__notes__ == [f"promotion.min_sucess_rate ({path} [promotion]): unknown setting"]
    path.write_text("[promotion\nmin_executions = 3\n")
    with pytest.raises(ConfigError, match=f"{path} is not valid TOML"):
        load_promotion_config(path)


def test_every_setting_keeps_a_description() -> None:
    for model in (PromotionConfig, Settings):
        assert all(f.description for f in model.model_fields.values()), model.__name__
