"""``skillflow deploy --source``: where each worker finds the flows' code, as the deployment records it.

The default is this project directory, so every worker needs the checkout at the same path; ``--source`` names
the directory the workers hold it at, or a git repository each run clones. A run on a worker whose directory
differs from the deploying one's is in ``tests/fleet/test_code_source.py``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from flows.serve import PROJECT_ROOT, CodeSource
from skillflow.lab.fleet import BIN


def test_by_default_workers_change_into_this_project_directory() -> None:
    source = CodeSource.parse()
    assert (source.location, source.git) == (str(PROJECT_ROOT), False)
    step = source.storage().to_pull_step()
    assert step == {"prefect.deployments.steps.set_working_directory": {"directory": str(PROJECT_ROOT)}}


def test_a_directory_on_the_workers_is_their_pull_step_while_the_flows_load_from_here() -> None:
    storage = CodeSource.parse("/srv/skillflow").storage()
    assert storage.to_pull_step() == {
        "prefect.deployments.steps.set_working_directory": {"directory": "/srv/skillflow"}
    }
    assert storage.destination == PROJECT_ROOT  # what `from_source` loads the flows from at deploy time


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/acme/skillflow.git",
        "https://gitlab.example/acme/skillflow",
        "git@github.com:acme/skillflow.git",
        "ssh://git@git.example/acme/skillflow",
        "file:///srv/git/skillflow",
        "/srv/git/skillflow.git",
    ],
)
def test_a_git_repository_is_cloned_by_each_run(url: str) -> None:
    source = CodeSource.parse(url, branch="release")
    assert source.git
    step = source.storage().to_pull_step()["prefect.deployments.steps.git_clone"]
    assert (step["repository"], step["branch"]) == (url, "release")


def test_a_pinned_commit_is_in_the_pull_step() -> None:
    step = CodeSource.parse("https://github.com/acme/skillflow.git", commit="0123abc").storage().to_pull_step()
    assert step["prefect.deployments.steps.git_clone"]["commit_sha"] == "0123abc"


@pytest.mark.parametrize(
    ("source", "branch", "commit", "message"),
    [
        ("skillflow", None, None, "must be an absolute path"),
        ("./srv/skillflow", None, None, "must be an absolute path"),
        ("/srv/skillflow", "main", None, "need a git repository"),
        (None, None, "0123abc", "need a git repository"),
        ("https://github.com/acme/skillflow.git", "main", "0123abc", "not both"),
        ("https://github.com/acme/skillflow.git", "-upload-pack=x", None, "not a branch name"),
        ("https://github.com/acme/skillflow.git", None, "HEAD~1", "not a commit SHA"),
        ("https://bot:ghp_0123456789abcdef@github.com/acme/skillflow.git", None, None, "carries credentials"),
        ("https://x-access-token@github.com/acme/skillflow.git", None, None, "carries credentials"),
    ],
)
def test_a_source_workers_could_not_use_is_refused(
    source: str | None, branch: str | None, commit: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        CodeSource.parse(source, branch, commit)


def refused_deploy(tmp_path: Path, *args: str, api: str | None = "http://127.0.0.1:9/api") -> str:
    """``skillflow deploy`` with ``args`` against an unreachable Prefect API (or none): its one error line (exit
    2), having touched neither Prefect nor the database."""
    db = tmp_path / "never.db"
    env = {"PATH": str(BIN), "HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run(
        [str(BIN / "skillflow"), "deploy", "--pool", "p", "--db", f"sqlite:///{db}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env if api is None else {**env, "PREFECT_API_URL": api},
    )
    assert done.returncode == 2 and not done.stdout, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert not db.exists()
    return lines[0]


def test_the_cli_refuses_a_bad_source_in_one_line_before_touching_prefect_or_the_database(tmp_path: Path) -> None:
    token = "ghp_0123456789abcdefABCD"
    line = refused_deploy(tmp_path, "--source", f"https://u:{token}@h/r.git")
    assert line.startswith("error: --source carries credentials") and token not in line


def test_deploy_without_a_prefect_server_says_so_instead_of_deploying_to_a_temporary_one(tmp_path: Path) -> None:
    """Without PREFECT_API_URL, Prefect started a temporary server, took the ten deployments, and ended with the
    command, which reported success (found walking the README)."""
    line = refused_deploy(tmp_path, api=None)
    assert "PREFECT_API_URL is unset" in line
    assert not (tmp_path / "prefect").exists() or not any((tmp_path / "prefect").rglob("*.db"))


def test_the_deploy_output_says_where_workers_load_the_code_from() -> None:
    assert CodeSource.parse().describe() == f"the directory {PROJECT_ROOT} on every worker"
    pinned = CodeSource.parse("git@github.com:acme/skillflow.git", commit="0123abc").describe()
    assert pinned == "a clone of git@github.com:acme/skillflow.git at 0123abc per run (workers need git)"


def test_a_database_password_is_never_recorded_by_a_deployment() -> None:
    from flows.serve import build_deployments
    from skillflow.storage.engine import recordable_url

    assert recordable_url("postgresql://u:s3cret@db.example/skillflow") is None
    assert recordable_url("oracle+oracledb://app:s3cret@db.example:1521/?service_name=X") is None
    assert recordable_url("postgresql://u@db.example/skillflow?password=s3cret") is None
    assert recordable_url("oracle+oracledb://app@db.example:1521/?wallet_password=s3cret") is None
    assert recordable_url("postgresql://u@db/sf?sslkey=/k.pem") == "postgresql://u@db/sf?sslkey=/k.pem"
    assert recordable_url("postgresql://u@db.example/skillflow") == "postgresql://u@db.example/skillflow"
    assert recordable_url("postgresql://u@db.example/x?options=-csearch_path%3Dsf") == (
        "postgresql://u@db.example/x?options=-csearch_path%3Dsf"
    )
    assert recordable_url("sqlite:///.skillflow/skillflow.db") == "sqlite:///.skillflow/skillflow.db"
    served = build_deployments("postgresql://u:s3cret@db.example/skillflow")  # `skillflow serve`
    assert served and all(d.parameters["params"]["database_url"] is None for d in served)
    assert "s3cret" not in repr([d.parameters for d in served])
    plain = build_deployments("postgresql://u@db.example/skillflow")
    assert {d.parameters["params"]["database_url"] for d in plain} == {"postgresql://u@db.example/skillflow"}


@pytest.mark.parametrize(
    "pair",
    [
        "SKILLFLOW_OPENAI_API_KEY=sk-live-0123456789abcdef",
        "PGPASSWORD=hunter2-hunter2",
        "SKILLFLOW_LLM_BASE_URL=https://u:hunter2-hunter2@llm.example/v1",
    ],
)
def test_the_cli_refuses_a_secret_in_env_since_the_deployments_would_show_it(tmp_path: Path, pair: str) -> None:
    line = refused_deploy(tmp_path, "--env", pair)
    assert "a secret would be recorded in the deployments" in line, line
    assert "hunter2" not in line and "0123456789abcdef" not in line


def test_a_malformed_env_argument_is_refused_without_echoing_it(tmp_path: Path) -> None:
    line = refused_deploy(tmp_path, "--env", "sk-live-0123456789abcdef")  # the key forgotten: the value alone
    assert "--env expects KEY=VALUE" in line and "0123456789abcdef" not in line, line


def _checkout(at: Path, config: bool = True) -> Path:
    """A directory shaped like a skillflow checkout: ``flows/serve.py``, and ``config/skillflow.toml`` unless not."""
    (at / "flows").mkdir(parents=True)
    (at / "flows" / "serve.py").write_text("", encoding="utf-8")
    if config:
        (at / "config").mkdir()
        (at / "config" / "skillflow.toml").write_text((PROJECT_ROOT / "config" / "skillflow.toml").read_text())
    return at


def test_the_default_source_is_the_checkout_deploy_runs_in_not_where_the_package_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by an outside audit: with the README's non-editable install the ``flows`` package lives in
    site-packages, and the default source was that directory, so every run on the workers changed into it, read no
    ``config/skillflow.toml`` and applied the built-in defaults (``require_shadow = false``): new skills landed
    ACTIVE without review, where ``skillflow cycle`` in the checkout landed them in SHADOW."""
    import flows.serve as serve

    installed = tmp_path / "site-packages"
    (installed / "flows").mkdir(parents=True)  # an installed package: no config/ beside it
    monkeypatch.setattr(serve, "PROJECT_ROOT", installed)
    project = _checkout(tmp_path / "project")
    monkeypatch.chdir(project / "flows")  # anywhere inside the checkout
    source = CodeSource.parse()
    assert source.location == str(project)
    step = source.storage().to_pull_step()
    assert step == {"prefect.deployments.steps.set_working_directory": {"directory": str(project)}}
    monkeypatch.chdir(tmp_path)  # outside any checkout, with nothing but the installed package to go by
    with pytest.raises(ValueError, match="--source"):
        CodeSource.parse()


def test_deploy_warns_when_the_workers_directory_holds_no_config(tmp_path: Path) -> None:
    from flows.serve import missing_config_warning

    bare = _checkout(tmp_path / "bare", config=False)
    text = missing_config_warning(CodeSource.parse(str(bare)), {})
    assert text is not None and "require_shadow" in text and "ACTIVE" in text, text
    assert missing_config_warning(CodeSource.parse(str(bare)), {"SKILLFLOW_CONFIG_PATH": "/etc/sf.toml"}) is None
    assert missing_config_warning(CodeSource.parse(str(_checkout(tmp_path / "full"))), {}) is None
    assert missing_config_warning(CodeSource.parse("git@github.com:acme/skillflow.git"), {}) is None
    assert missing_config_warning(CodeSource.parse("/srv/not/on/this/machine"), {}) is None


def _cli(tmp_path: Path, *args: str, api: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(BIN), "HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "prefect")}
    if api is not None:
        env["PREFECT_API_URL"] = api
    return subprocess.run([str(BIN / "skillflow"), *args], capture_output=True, text=True, timeout=180, env=env)


@pytest.mark.parametrize("command", [["automations"], ["serve", "--db", "sqlite:///{tmp}/s.db"]])
def test_automations_and_serve_without_a_prefect_server_say_so_in_one_line(tmp_path: Path, command: list[str]) -> None:
    """Found by an outside audit: without PREFECT_API_URL, ``skillflow automations`` printed a 65-line traceback
    (the temporary server Prefect started has no deployments), and ``skillflow serve`` served every deployment on a
    temporary server at a random port that nothing else could reach and that ended with the command."""
    done = _cli(tmp_path, *[a.format(tmp=tmp_path) for a in command])
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "PREFECT_API_URL" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.prefect
def test_automations_on_a_server_without_the_deployments_says_to_deploy_first(
    prefect_harness: None, tmp_path: Path
) -> None:
    from prefect.settings import PREFECT_API_URL

    done = _cli(tmp_path, "automations", api=PREFECT_API_URL.value())
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "skillflow deploy" in lines[0] and "Traceback" not in done.stderr, done.stderr
