"""``skillflow bench retrieval``: skill search latency vs a numpy floor, embedding latency, precision@1."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer
from rich.table import Table

from skillflow.cli.app import JsonOption, bench_app, console, fail, print_json
from skillflow.cli.terminal import safe


def _ints(raw: str, option: str) -> list[int]:
    try:
        values = [int(x.replace("_", "")) for x in raw.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 1 for v in values):
        fail(f"{option} must be comma-separated positive integers, got {raw!r}")
    return values


@bench_app.command("retrieval")
def bench_retrieval(
    skills: Annotated[
        str, typer.Option("--skills", help="Comma-separated skills per tenant for latency.")
    ] = "100,1000,10000",
    pools: Annotated[
        str, typer.Option("--pools", help="Comma-separated skills per tenant for precision.")
    ] = "5,25,100",
    embedder: Annotated[str, typer.Option("--embedder", help="minilm (default model), hashing or openai.")] = "minilm",
    vectors_per_skill: Annotated[
        int, typer.Option("--vectors-per-skill", min=1, max=65, help="Vectors per filler skill (1 profile + triggers).")
    ] = 6,
    queries: Annotated[int, typer.Option("--queries", min=10, help="Timed queries per size.")] = 300,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Tenants (random pools) per precision size.")] = 5,
    threshold: Annotated[float, typer.Option("--threshold", help="retrieval_min_similarity to apply.")] = 0.70,
    tenant_index: Annotated[
        bool,
        typer.Option("--tenant-index/--no-tenant-index", help="Create the proposed (agent, user, updated_at) index."),
    ] = True,
    filler: Annotated[
        str,
        typer.Option(
            "--filler", help="Latency skills: random (worst case, unprunable) or text (one realistic domain)."
        ),
    ] = "random",
    tau_bench: Annotated[
        str,
        typer.Option("--tau-bench", help="τ-bench airline JSON for the applicability section ('' skips it)."),
    ] = "/work/shared/corpora/tau-bench/gpt-4o-airline.json",
    api_bank: Annotated[
        str,
        typer.Option("--api-bank", help="API-Bank level-1 folder for the applicability section ('' skips it)."),
    ] = "/work/shared/corpora/api-bank/level-1-given-desc",
    cv_seeds: Annotated[
        str,
        typer.Option(
            "--cv-seeds",
            help="Comma-separated seeds of the grouped 5-fold splits of τ-bench and API-Bank (one split each; "
            "with several, every seed's figures and their mean are shown).",
        ),
    ] = "0",
    tau_group: Annotated[
        str,
        typer.Option(
            "--tau-group",
            help="What the every-call protocol's τ-bench folds keep together: task (its trials) or customer (a "
            "customer's tasks, often variants of one scenario).",
        ),
    ] = "task",
    prepare_probes: Annotated[int, typer.Option("--prepare-probes", min=0, help="Timed prepare() calls.")] = 60,
    prepare_filler: Annotated[
        int,
        typer.Option(
            "--prepare-filler", min=0, help="Extra live skills (synthetic procedures) in the prepare() tenant."
        ),
    ] = 10_000,
    sets: Annotated[
        bool,
        typer.Option("--applicability-sets/--no-applicability-sets", help="Fitted rule on the bank and simulator."),
    ] = True,
    every_call: Annotated[
        bool,
        typer.Option(
            "--every-call/--no-every-call",
            help="prepare() before every model call of the held-out τ-bench and API-Bank conversations, and on "
            "their first requests alone (τ-bench under both outcomes): per fold on the first --cv-seeds seed, "
            "pooled on each seed with their mean.",
        ),
    ] = True,
    json: JsonOption = False,
) -> None:
    """Retrieval p50/p95 (excluding query embedding) next to the numpy floor; precision@1 on held-out paraphrases."""
    from skillflow.lab.bench.retrieval_bench import run

    if filler not in ("random", "text"):
        fail("--filler must be random or text")
    seeds = _seeds(cv_seeds)
    if tau_group not in ("task", "customer"):
        fail("--tau-group must be task or customer")

    def say(msg: str) -> None:
        if not json:
            console.print(f"[dim]{safe(msg)}…[/dim]")

    result = run(
        _ints(skills, "--skills"),
        _ints(pools, "--pools"),
        embedder,
        vectors_per_skill,
        queries,
        rounds,
        threshold,
        tenant_index,
        progress=say,
        filler=filler,
    )
    cv: dict[str, list[Any]] = {}
    app_result, prepare_ms = _applicability(
        tau_bench, embedder, threshold, (prepare_probes, prepare_filler), say, seeds, cv
    )
    more = _applicability_sets(embedder, threshold, say) if sets else {}
    more.update(_api_bank(api_bank, embedder, threshold, say, seeds, cv))
    calls = _every_call(tau_bench, api_bank, embedder, say, seeds[0], tau_group) if every_call else {}
    calls_cv: dict[str, list[dict[str, Any]]] = {}
    if every_call and len(seeds) > 1:  # the split moves these figures more than most changes do (BENCHMARKS)
        others = [(s, _every_call(tau_bench, api_bank, embedder, say, s, tau_group)) for s in seeds[1:]]
        calls_cv = _every_call_cv([(seeds[0], calls), *others])
    if json:
        doc = result.as_dict()
        doc["applicability"] = app_result.as_dict() if app_result else None
        doc["applicability_sets"] = {k: v.as_dict() for k, v in more.items()}
        doc["applicability_cv"] = {
            name: [{"seed": seed, "rows": r.as_dict()["rows"], "fitted": r.fitted} for seed, r in runs]
            for name, runs in cv.items()
        }
        doc["prepare_ms"] = prepare_ms
        doc["every_call"] = {k: v.as_dict() for k, v in calls.items()}
        doc["every_call_cv"] = calls_cv
        print_json(doc)
        return
    lat = _table(
        f"retrieval latency (SQLite, {result.vectors_per_skill} vectors/skill, excl. embedding)",
        ("skills", "vectors", "p50 ms", "p95 ms", "floor p50", "floor p95", "cold load ms"),
    )
    for r in result.latency:
        lat.add_row(
            f"{r.skills:,}", f"{r.vectors:,}", f"{r.p50_ms:.3f}", f"{r.p95_ms:.3f}",
            f"{r.floor_p50_ms:.3f}", f"{r.floor_p95_ms:.3f}", f"{r.cold_load_ms:.0f}",
        )  # fmt: skip
    console.print(lat)
    console.print(
        f"query embedding ({result.embedder}): p50 {result.embed_p50_ms:.2f} ms, p95 {result.embed_p95_ms:.2f} ms"
    )
    prec = _table(
        f"precision on held-out paraphrases ({result.intents} intents, threshold {result.threshold})",
        ("skills/tenant", "queries", "precision@1", "hit@1", "wrong skill", "miss", "out-of-pool wrong"),
    )
    for p in result.precision:
        oop = f"{p.out_of_pool_wrong_rate:.3f} of {p.out_of_pool_queries}"
        prec.add_row(
            str(p.skills_per_tenant), str(p.queries), f"{p.precision_at_1:.3f}", f"{p.hit_at_1:.3f}",
            f"{p.wrong_skill_rate:.3f}", f"{p.miss_rate:.3f}", oop,
        )  # fmt: skip
    console.print(prec)
    for extra in more.values():
        _print_applicability(extra, None)
    _print_applicability(app_result, prepare_ms)
    if len(seeds) > 1:
        _print_cv(cv)
    if calls:
        _print_every_call(calls)
    if calls_cv:
        _print_every_call_cv(calls_cv)


def _every_call(
    tau: str, api: str, embedder_name: str, say: Callable[[str], None], seed: int, tau_group: str = "task"
) -> dict[str, Any]:
    """The every-call protocol (docs/BENCHMARKS.md, "Every model call"): τ-bench under the execution and the
    reward outcome (its folds grouped by ``tau_group``), API-Bank under execution; corpora that are skipped or
    absent are left out."""
    from pathlib import Path

    from skillflow.injection.embeddings import get_embedder
    from skillflow.kernel.config import load_promotion_config
    from skillflow.lab.bench.every_call import api_bank_corpus, evaluate_calls, tau_corpus
    from skillflow.lab.bench.retrieval_bench import CachedEmbedder
    from skillflow.lab.ingest.tau_bench import HANDOFF_TOOLS

    emb = CachedEmbedder(get_embedder(embedder_name))
    config = load_promotion_config()
    out: dict[str, Any] = {}
    if tau and Path(tau).is_file():
        for outcome in ("execution", "reward"):
            segs, dialogs = tau_corpus(Path(tau), outcome, tau_group)
            out[f"tau-bench/{outcome}"] = evaluate_calls(
                segs, dialogs, emb, config, seed=seed, outcome=outcome, progress=say, handoffs=HANDOFF_TOOLS
            )
    if api and Path(api).is_dir():
        segs, dialogs = api_bank_corpus(Path(api))
        out["api-bank/execution"] = evaluate_calls(
            segs, dialogs, emb, config, seed=seed, corpus="API-Bank level-1", progress=say
        )
    return out


def _print_every_call(calls: dict[str, Any]) -> None:
    """Per fold, pooled and the hindsight floor; then single-turn (targets in docs/BENCHMARKS.md)."""
    cols = ("set / outcome", "fold", "calls", "pre-write hit", "open hit", "wrong", "false", "misleading",
            "no-write share", "re-inject", "outside gold", "reinforce", "right write")  # fmt: skip
    table = _table("prepare() before every model call of unseen conversations (grouped 5-fold)", cols)
    for name, r in calls.items():
        rows = [*((str(k), f) for k, f in enumerate(r.per_fold)), ("pooled", r.pooled), ("hindsight", r.hindsight),
                ("hindsight, every target", r.hindsight_all)]  # fmt: skip
        for fold, f in rows:
            gold = "gold" if name.startswith("tau") else ""
            table.add_row(
                name, fold, str(f["calls"]),
                f"{f['pre_write_hit']:.3f}" if f["pre_write_P"] else "n/a (no skill)",
                f"{f['pre_write_open_hit']:.3f} of {f['pre_write_open_P']}" if f["pre_write_open_P"] else "n/a",
                f"{f['pre_write_wrong']:.3f}",
                f"{f['pre_write_false']:.3f}", f"{f['misleading']:.3f}", f"{f['no_write_share']:.3f}",
                str(f["reinjections"]), f"{f['outside_gold']:.3f}" if gold else "-",
                f"{f['reinforcement']:.3f} of {f['wrong_writes']}" if gold else "-",
                f"{f['right_write_same']:.3f} of {f['right_writes']}" if gold else "-",
            )  # fmt: skip
    console.print(table)
    _print_gold(calls)
    single = _table(
        "prepare(query) alone on the held-out first requests (single-turn)",
        (
            "set / outcome",
            "fold",
            "hit",
            "wrong",
            "false",
            "of it a gold write",
            "P / N",
            "not seen in training: hit / wrong / false",
            "seen (twins)",
        ),
    )
    for name, r in calls.items():
        for fold, f in [*((str(k), f) for k, f in enumerate(r.single_per_fold)), ("pooled", r.single)]:
            single.add_row(
                name,
                fold,
                f"{f['hit']:.3f}",
                f"{f['wrong']:.3f}",
                f"{f['false']:.3f}",
                f"{f['false_gold_write']:.3f}" if name.startswith("tau") else "-",
                f"{f['P']} / {f['N']}",
                f"{f['hit_unseen']:.3f} / {f['wrong_unseen']:.3f} / {f['false_unseen']:.3f}",
                str(f["twins"]),
            )
    console.print(single)
    for name, r in calls.items():
        sib = r.siblings
        if sib.get("tasks"):
            console.print(
                f"{name} siblings (the ceiling): {sib['tasks_same_writes']} of {sib['tasks']} tasks' conversations make"
                f" the same writes; {sib['no_write_with_writing_sibling']} of {sib['no_write_conversations']} no-write"
                f" conversations have a sibling that writes; task oracle, single-turn: hit {sib['oracle_hit']:.3f}"
                f" wrong {sib['oracle_wrong']:.3f} (P {sib['oracle_P']}), false {sib['oracle_false']:.3f}"
                f" (N {sib['oracle_N']})"
            )


def _print_gold(calls: dict[str, Any]) -> None:
    """The misleading and no-write figures judged against the task's gold actions (τ-bench) beside the agent's."""
    cols = ("set / outcome", "fold", "misleading", "of it a gold write", "no-write share", "gold writes: share",
            "no gold write: share")  # fmt: skip
    table = _table("misleading and no-write calls against the gold actions (what a correct agent does)", cols)
    for name, r in calls.items():
        if not name.startswith("tau"):
            continue
        for fold, f in [*((str(k), f) for k, f in enumerate(r.per_fold)), ("pooled", r.pooled)]:
            table.add_row(
                name, fold, f"{f['misleading']:.3f}", f"{f['misleading_gold_write']:.3f}", f"{f['no_write_share']:.3f}",
                f"{f['no_write_gold_share']:.3f} of {f['no_write_gold_calls']}",
                f"{f['no_write_none_share']:.3f} of {f['no_write_none_calls']}",
            )  # fmt: skip
    if table.row_count:
        console.print(table)


CV_FIGURES = ("pre_write_open_hit", "pre_write_hit", "pre_write_wrong", "pre_write_false", "misleading",
              "misleading_gold_write", "no_write_share", "no_write_gold_share", "no_write_none_share", "reinjections",
              "outside_gold", "reinforcement")  # fmt: skip


HINDSIGHT_CV = ("hindsight_open_hit", "hindsight_misleading", "hindsight_no_write_share")


def _every_call_cv(splits: list[tuple[int, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Each set's pooled and single-turn figures on every split, then their mean (``seed`` = ``"mean"``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for seed, calls in splits:
        for name, r in calls.items():
            row = {k: r.pooled[k] for k in CV_FIGURES}
            row.update(
                single_wrong=r.single["wrong"], single_false=r.single["false"],
                single_false_gold_write=r.single["false_gold_write"],
                single_false_unseen=r.single["false_unseen"], single_twins=r.single["twins"],
                single_hit=r.single["hit"], single_hit_unseen=r.single["hit_unseen"],  # in the JSON only
                # the ceiling beside them: the hindsight floor within every target, chosen on this split's probes
                hindsight_open_hit=r.hindsight_all["pre_write_open_hit"],
                hindsight_misleading=r.hindsight_all["misleading"],
                hindsight_no_write_share=r.hindsight_all["no_write_share"],
            )  # fmt: skip
            out.setdefault(name, []).append({"seed": seed, **row})
    for rows in out.values():
        keys = [k for k in rows[0] if k != "seed"]
        rows.append({"seed": "mean", **{k: sum(r[k] for r in rows) / len(rows) for k in keys}})
    return out


def _print_every_call_cv(calls_cv: dict[str, list[dict[str, Any]]]) -> None:
    """The pooled every-call and single-turn figures per split and their mean: how far the split moves them."""
    cols = ("set / outcome", "seed", "open hit", "pre-write hit", "wrong", "false", "misleading", "of it gold write",
            "no-write share", "gold writes", "no gold write", "re-inject", "outside gold", "reinforce", "single wrong",
            "single false", "of it gold write", "single false, unseen", "twins", "hindsight: open hit",
            "hindsight: misleading", "hindsight: no-write")  # fmt: skip
    table = _table("every model call, pooled, on each split (--cv-seeds) and their mean", cols)
    for name, rows in calls_cv.items():
        for r in rows:
            keys = (
                *CV_FIGURES,
                "single_wrong",
                "single_false",
                "single_false_gold_write",
                "single_false_unseen",
                "single_twins",
                *HINDSIGHT_CV,
            )
            figures = (f"{r[k]:.3f}" if k != "single_twins" else f"{r[k]:g}" for k in keys)
            table.add_row(name, str(r["seed"]), *figures)
    console.print(table)


def _table(title: str, columns: Sequence[str]) -> Table:
    """A table of right-aligned columns (every bench table here)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    return table


def _seeds(raw: str) -> list[int]:
    try:
        values = [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v < 0 for v in values):
        fail(f"--cv-seeds must be comma-separated non-negative integers, got {raw!r}")
    return values


def _applicability_sets(embedder_name: str, threshold: float, say: Callable[[str], None]) -> dict[str, Any]:
    """The fitted rule on the bench bank and on the simulator (docs/BENCHMARKS.md, "## Applicability")."""
    from skillflow.injection.embeddings import get_embedder
    from skillflow.kernel.config import load_promotion_config
    from skillflow.lab.bench.applicability_sets import run_bank, run_simulator
    from skillflow.lab.bench.retrieval_bench import CachedEmbedder

    emb = CachedEmbedder(get_embedder(embedder_name))
    config = load_promotion_config()
    return {"bank": run_bank(emb, config, threshold, say), "simulator": run_simulator(emb, config, threshold, say)}


def _api_bank(
    path: str, embedder_name: str, threshold: float, say: Callable[[str], None], seeds: list[int], cv: dict[str, Any]
) -> dict[str, Any]:
    """The API-Bank section (5-fold CV grouped by scenario, per seed); nothing when skipped or absent."""
    from pathlib import Path

    from skillflow.injection.embeddings import get_embedder
    from skillflow.kernel.config import load_promotion_config
    from skillflow.lab.bench.applicability_sets import run_api_bank
    from skillflow.lab.bench.retrieval_bench import CachedEmbedder

    if not path:
        return {}
    emb = CachedEmbedder(get_embedder(embedder_name))
    config = load_promotion_config()
    runs = [(seed, run_api_bank(emb, config, threshold, say, Path(path), seed)) for seed in seeds]
    found = [(seed, r) for seed, r in runs if r is not None]
    if not found:
        return {}
    cv["api-bank"] = found
    return {"api_bank": found[0][1]}


def _applicability(
    path: str,
    embedder_name: str,
    threshold: float,
    prepare: tuple[int, int],
    say: Callable[[str], None],
    seeds: list[int],
    cv: dict[str, list[Any]],
) -> tuple[Any, dict[str, float] | None]:
    """The τ-bench applicability section (5-fold CV grouped by task, per seed) and prepare() timing."""
    from pathlib import Path

    from skillflow.injection.embeddings import get_embedder
    from skillflow.kernel.config import load_promotion_config
    from skillflow.lab.bench.applicability_bench import run_tau_bench, tau_segments, time_prepare
    from skillflow.lab.bench.retrieval_bench import CachedEmbedder
    from skillflow.lab.ingest.tau_bench import HANDOFF_TOOLS

    if not path:
        return None, None
    emb = CachedEmbedder(get_embedder(embedder_name))
    config = load_promotion_config()
    runs = [(seed, run_tau_bench(Path(path), emb, config, threshold, say, seed)) for seed in seeds]
    result = runs[0][1]
    if result is None:
        return None, None
    cv["tau-bench"] = runs
    probes, filler = prepare
    if probes <= 0:
        return result, None
    segs = tau_segments(Path(path))
    return result, time_prepare(segs, get_embedder(embedder_name), config, probes, filler, HANDOFF_TOOLS)


def _print_cv(cv: dict[str, list[Any]]) -> None:
    """The fitted rule per grouped split and the mean over the splits."""
    table = _table(
        "fitted rule per grouped 5-fold split (seed) and the mean",
        ("set", "seed", "level", "hit@1", "wrong", "miss", "false-injection"),
    )
    for name, runs in cv.items():
        for level in ("intent", "class"):
            rates = [r.rows["fitted"][level] for _, r in runs]
            for (seed, _), x in zip(runs, rates, strict=True):
                table.add_row(
                    name, str(seed), level, f"{x.hit:.3f}", f"{x.wrong:.3f}", f"{x.miss:.3f}", f"{x.false:.3f}"
                )
            mean = [sum(getattr(x, k) for x in rates) / len(rates) for k in ("hit", "wrong", "miss", "false")]
            table.add_row(name, "mean", level, *(f"{v:.3f}" for v in mean))
    console.print(table)


def _print_applicability(result: Any, prepare_ms: dict[str, float] | None) -> None:
    if result is None:
        console.print("[yellow]τ-bench applicability skipped (corpus file not found)[/yellow]")
        return
    grouped = "" if "grouped by" in result.corpus or "rounds" in result.corpus else ", grouped by task"
    table = _table(
        f"{safe(result.corpus)}: {result.segments} segments, {result.folds} folds{grouped}",
        ("rule", "level", "hit@1", "wrong", "miss", "false-injection", "P / N"),
    )
    names = {
        "fitted": "fitted (product)",
        "hindsight": "hindsight floor (achievable)",
        "fixed": f"fixed {result.threshold} (before)",
        "ceiling": "no-abstention ceiling",
    }
    for row, levels in result.rows.items():
        for level, r in levels.items():
            table.add_row(
                names[row], level, f"{r.hit:.3f}", f"{r.wrong:.3f}", f"{r.miss:.3f}", f"{r.false:.3f}", f"{r.P} / {r.N}"
            )
    console.print(table)
    console.print(f"decide() after embedding: p50 {result.decide_p50_ms:.3f} ms, p95 {result.decide_p95_ms:.3f} ms")
    for f in result.fitted:
        console.print(
            safe(
                f"  fold {f['fold']}: skills={f['skills']} view={f['view']} score={f['strength'] or 'nearest'} "
                f"margin={f['margin']} {f['reason']}"
            )
        )
    if prepare_ms:
        console.print(
            f"prepare() at {prepare_ms['skills']:,.0f} live skills ({prepare_ms['probes']:.0f} turns): first call of "
            f"a turn (embedding included) p50 {prepare_ms['p50']:.1f} ms, p95 {prepare_ms['p95']:.1f} ms; a later "
            f"call of the same turn p50 {prepare_ms['next_p50']:.1f} ms, p95 {prepare_ms['next_p95']:.1f} ms; "
            f"the fitted rule's retrieval alone p50 {prepare_ms['rule_p50']:.2f} ms, "
            f"p95 {prepare_ms['rule_p95']:.2f} ms"
        )
