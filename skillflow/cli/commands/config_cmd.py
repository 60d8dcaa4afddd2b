"""``skillflow config``: the effective, validated settings (TOML + environment)."""

from __future__ import annotations

from rich.table import Table

from skillflow.cli.app import JsonOption, app, console, print_json
from skillflow.cli.terminal import safe
from skillflow.kernel.config import DEFAULTS, PromotionConfig, Settings, load_promotion_config, load_schedules
from skillflow.storage.engine import shown_url


def settings_markdown() -> str:
    """The settings tables of the README, generated from the models (a test keeps them in step)."""
    lines = ["| Key | Default | Meaning |", "|---|---|---|"]
    for name, field in PromotionConfig.model_fields.items():
        lines.append(f"| `{name}` | `{field.default!r}` | {field.description} |")
    lines += ["", "| Environment variable | Default | Meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = "unset" if field.default is None else f"`{field.default}`"
        lines.append(f"| `SKILLFLOW_{name.upper()}` | {default} | {field.description} |")
    return "\n".join(lines)


@app.command("config")
def config_command(as_json: JsonOption = False, markdown: bool = False) -> None:
    """Print which config file was read, the effective promotion config and schedules (a typo is an error)."""
    if markdown:
        print(settings_markdown())
        return
    cfg = load_promotion_config()
    schedules = load_schedules()
    settings = Settings()
    read = "none: built-in defaults" if cfg.source == DEFAULTS else cfg.source
    if as_json:
        print_json(
            {
                "config_file": None if cfg.source == DEFAULTS else cfg.source,
                "source": cfg.source,
                "promotion": cfg.model_dump(mode="json"),
                "schedules": schedules,
                "database_url": shown_url(settings.database_url),  # printed: never its password
                "embedder": settings.embedder,
                "distiller": settings.distiller,
                "judge": settings.judge,
            }
        )
        return
    console.print(f"config file: {safe(read)}", soft_wrap=True)
    table = Table("key", "value", title="promotion config")
    for key, value in cfg.model_dump().items():
        table.add_row(key, safe(repr(value)))
    console.print(table)
    sched = Table("flow", "cron", title="schedules")
    for flow, cron in schedules.items():
        sched.add_row(safe(flow), safe(cron or "manual only"))
    console.print(sched)
