"""Options shared by the detection commands, so each reads the same way everywhere (issue 38: one convention for
machine-readable output, ``--format json``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

FORMATS = ("table", "json")


def format_option(help: str) -> Callable[[Any], Any]:
    """``--format table|json`` (``fmt``): a text table by default, one JSON document (or line) with ``json``."""
    return click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help=help)
