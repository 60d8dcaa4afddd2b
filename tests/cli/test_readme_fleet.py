"""The README's fleet settings table is in step with ``FleetSettings`` (names and defaults)."""

from __future__ import annotations

from pathlib import Path

from tasks.fanout import FleetSettings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")


def test_every_fleet_setting_is_in_the_readme_with_its_default() -> None:
    missing = [
        name
        for name, field in FleetSettings.model_fields.items()
        if f"| `SKILLFLOW_FLEET_{name.upper()}` | `{field.default}` |" not in README
    ]
    assert not missing, f"fleet settings missing from the README table: {missing}"
