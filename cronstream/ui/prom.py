"""The dashboard's questions to Prometheus besides the overview's tiles
(``sources.QUERIES``): the overview's charts of the last hour (range queries), a
tenant page's figures and the late-and-stuck list's (instant queries). Every query is
in one of the lists below, so a renamed metric or a new label is one line to change.
Prometheus away or refusing: the answer says why, the charts say "no data", and the
page renders anyway."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from cronstream.ui.charts import line_chart
from cronstream.ui.sources import QUERIES, Prometheus

HOUR_S, STEP_S = 3600.0, 30.0  # the charts' window and resolution (121 points)
FAILED = "FAILED|TIMED_OUT|DEAD_LETTERED"  # a failed attempt's statuses (RETRIED is not)
ASKED = (httpx.HTTPError, KeyError, ValueError, TypeError)  # away, refusing, or not it


@dataclass(frozen=True, slots=True)
class ChartQuery:
    name: str  # the chart's id on the page
    title: str
    unit: str  # "/s", "s" (shown as ms or s), "records"
    expr: str  # PromQL; ``{tenant}`` stands for a tenant's matcher ("" for everyone's)
    by: str | None = None  # the label naming each line (None: one line, the title)


# The overview's charts (the workers' start skew: an attempt's start minus its due time).
RUNS = "cronstream_worker_runs_finished_total"
SKEW = "cronstream_worker_start_skew_seconds_bucket"
CHARTS = (
    ChartQuery("fires", "fires/s", "/s", "sum(rate(cronstream_scheduler_fires_total[1m]))"),
    ChartQuery(
        "runs", "runs finished/s", "/s", f"sum by (status) (rate({RUNS}{{tenant}}[1m]))", "status"
    ),
    ChartQuery(
        "failures", "failures/s", "/s", f'sum(rate({RUNS}{{status=~"{FAILED}"{{tenant}}}}[1m]))'
    ),
    ChartQuery(
        "start-skew",
        "due-to-start p99",
        "s",
        f"histogram_quantile(0.99, sum by (le, priority) (rate({SKEW}[1m])))",
        "priority",
    ),
    ChartQuery("lag", "consumer lag", "records", QUERIES["lag"], "role"),
)


def chart_expr(chart: ChartQuery, tenant: str | None) -> str:
    """``chart``'s query, for ``tenant``: the runs and failures its own (the workers'
    per-tenant counter), the stack's health (fires, skew, lag) everyone's."""
    if tenant is None or "{tenant}" not in chart.expr:
        return chart.expr.replace("{tenant}", "")
    own = chart.expr.replace(RUNS, "cronstream_worker_tenant_runs_total")
    inner = f',tenant="{tenant}"' if "{status" in chart.expr else f'{{tenant="{tenant}"}}'
    return own.replace("{tenant}", inner)


def charts(prometheus: Prometheus, tenant: str | None, now: float) -> tuple[list[Any], str | None]:
    """Each chart of ``CHARTS`` over the last hour: ``{"name", "title", "svg"}``; and why
    Prometheus gave no answer (then every chart says "no data": one that did not
    answer is not asked again for the others)."""
    start = now - HOUR_S
    out: list[dict[str, str]] = []
    error = None
    for chart in CHARTS:
        series: dict[str, list[tuple[float, float]]] = {}
        if error is None:
            try:
                found = prometheus.query_range(chart_expr(chart, tenant), start, now, STEP_S)
            except ASKED as exc:
                error = f"Prometheus at {prometheus.url} did not answer ({exc})"
                found = []
            for labels, points in found:
                series[labels.get(chart.by, "?") if chart.by else chart.title] = points
        svg = line_chart(series, title=chart.title, unit=chart.unit, start=start, end=now)
        out.append({"name": chart.name, "title": chart.title, "svg": svg})
    return out, error


def tenant_queries(tenant: str) -> dict[str, str]:
    """A tenant page's figures (``tenant``: a-z, 0-9, '-', safe in a matcher)."""
    commands = f'cronstream_admission_commands_total{{tenant="{tenant}"'
    deferred = f'cronstream_fires_deferred_total{{tenant="{tenant}"}}'
    return {
        "triggers_1m": f'sum(increase({commands},action="TRIGGER",verdict="accepted"}}[1m]))',
        "refused_1h": f'sum by (action) (increase({commands},verdict="refused"}}[1h]))',
        "jobs": f'max(cronstream_admission_jobs{{tenant="{tenant}"}})',
        "deferred_1h": f"sum(increase({deferred}[1h]))",
        "deferred_rate": f"sum(rate({deferred}[5m]))",
        "streaks": "max by (job_id) "
        f'(cronstream_worker_job_failure_streak{{job_id=~"{tenant}/.+"}})',
    }


# The late-and-stuck list's figures of the stack.
STUCK_QUERIES = {
    "owned": 'sum(cronstream_scheduler_partitions_owned{role="scheduler"})',
    "partitions": 'max(cronstream_scheduler_partitions{role="scheduler"})',
    "lag": QUERIES["lag"],
    "held": "sum(cronstream_worker_runs_held)",
    "deferred": "sum by (tenant) (increase(cronstream_fires_deferred_total[10m])) > 0",
    "skew": "histogram_quantile(0.99, sum by (le) "
    "(rate(cronstream_worker_start_skew_seconds_bucket[5m])))",
    "missed": 'sum(increase(cronstream_worker_deadline_alerts_total{kind="DEADLINE_MISSED"}[1h]))',
}

Answers = dict[str, list[tuple[dict[str, str], float]]]


def ask(prometheus: Prometheus, queries: Mapping[str, str]) -> tuple[Answers, str | None]:
    """Each query's answer (an empty one for those not asked), and why Prometheus gave
    none (then the rest are not asked)."""
    answers: Answers = {name: [] for name in queries}
    for name, expr in queries.items():
        try:
            answers[name] = prometheus.query(expr)
        except ASKED as exc:
            return answers, f"Prometheus at {prometheus.url} did not answer ({exc})"
    return answers, None


def one(answers: Answers, name: str) -> float | None:
    """The single value of an answer (the first, if several), None for none."""
    found = answers.get(name) or []
    return found[0][1] if found else None
