"""The sparktap command: help everywhere, version, one-line errors."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from sparktap import __version__
from sparktap.cli import cli


def _all_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += _all_commands(command, (*prefix, name))
        else:
            found.append((*prefix, name))
    return found


def test_version() -> None:
    result = CliRunner().invoke(cli, ["version"])
    assert result.exit_code == 0
    assert result.output == f"sparktap {__version__} (event schema 1.3)\n"


@pytest.mark.parametrize("path", _all_commands(cli), ids=lambda p: " ".join(p) or "sparktap")
def test_every_command_has_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "spark"], "--engine spark needs --checkpoint DIR: the query's offsets live there"),
        (
            ["--engine", "spark", "--checkpoint", "chk", "--metrics-port", "0"],
            "--metrics-port does not apply to --engine spark; see sparktap collect --help",
        ),
        (
            ["--trigger", "available-now", "--max-offsets-per-trigger", "5"],
            "--trigger, --max-offsets-per-trigger do not apply to --engine consumer; see sparktap collect --help",
        ),
    ],
    ids=["spark without checkpoint", "consumer option with spark", "spark options with consumer"],
)
def test_collect_refuses_options_of_the_other_engine(args: list[str], message: str) -> None:
    from sparktap.errors import ConfigError

    result = CliRunner().invoke(cli, ["collect", *args])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == message


def test_demo_table_aligns_columns_without_trailing_spaces() -> None:
    from sparktap.detection.findings import text_table

    text = text_table(
        [("healthy", "-", "nothing to report"), ("skewed-join", "data_skew", "Largest task …")],
        ("job", "rule", "finding"),
    )
    assert text.splitlines() == [
        "job          rule       finding",
        "-----------  ---------  -----------------",
        "healthy      -          nothing to report",
        "skewed-join  data_skew  Largest task …",
    ]
