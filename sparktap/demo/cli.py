"""``sparktap demo``."""

from __future__ import annotations

from pathlib import Path

import click

from sparktap.errors import SparktapError


@click.command("demo")
@click.option(
    "-o",
    "--output",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sparktap-demo"),
    show_default=True,
    help="Folder for the store, reports, Grafana bundle and logs (store made fresh).",
)
def demo_command(output: Path) -> None:
    """Run the demo: an embedded Kafka broker, the collector on chDB, five small PySpark jobs with the listener
    (healthy, skewed join, tiny partitions, shuffle blow-up, small files), then print what sparktap found and write
    an HTML report per job and the Grafana provisioning bundle."""
    try:
        import pyspark  # noqa: F401

        from sparktap.local.broker import TansuBroker  # noqa: F401
    except ImportError as exc:
        raise SparktapError(
            f"the demo needs pyspark and the embedded broker: pip install 'sparktap[demo]' ({exc})"
        ) from exc
    from sparktap.demo.jobs import DEMO_THRESHOLDS, JOBS
    from sparktap.demo.runner import run_demo
    from sparktap.detection.findings import FINDING_HEADERS, finding_row, text_table

    click.echo(
        "sparktap demo — Spark jobs report themselves live; thresholds are the documented defaults with "
        "byte/second floors scaled to demo-sized data."
    )
    try:
        result = run_demo(output, echo=click.echo)
    except KeyboardInterrupt:
        click.echo("\ninterrupted: stopped the broker, the collector and Spark", err=True)
        raise SystemExit(130) from None
    rows = []
    for job in JOBS:
        found = result.findings_for(job.name)
        if not found:
            rows.append((job.name, "-", "-", "-", "nothing to report"))
        for f in sorted(found, key=lambda f: (f.rule, f.stage_id or 0)):
            rows.append((job.name, *finding_row(f)))
    click.echo("")
    click.echo(text_table(rows, ("job", *FINDING_HEADERS)))
    fixes = {(f.rule, f.suggested_fix) for f in result.findings}
    if fixes:
        click.echo("\nSuggested fixes:")
        for rule, fix in sorted(fixes):
            click.echo(f"  {rule}: {fix}")
    scaled = ", ".join(
        f"{group}.{name}={value}"
        for group, values in DEMO_THRESHOLDS.model_dump().items()
        for name, value in values.items()
        if value != getattr(getattr(type(DEMO_THRESHOLDS)(), group), name)
    )
    click.echo(f"\n(demo floors: {scaled})")
    click.echo(f"\n{result.events} events from {len(result.apps)} applications in {result.seconds:.0f}s.")
    click.echo(f"  store:    chdb://{result.store}   (sparktap report APP_ID --clickhouse-url chdb://{result.store})")
    for name, path in result.reports.items():
        click.echo(f"  report:   {path}   ({name}, {result.apps[name]})")
    click.echo(f"  grafana:  {result.grafana}/   (provisioning files: datasource, dashboards, alerting)")
    click.echo(f"  logs:     {result.output / 'logs'}/")


COMMANDS = [demo_command]
