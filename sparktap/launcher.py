"""The ``sparktap`` command's entry point: says clearly what a Python older than 3.11 can run, else the CLI.

On Python 3.9 and 3.10 (driver hosts) the distribution installs the listener jars and the relay only, with
confluent-kafka as its one dependency; the collector and the rest of the command need Python 3.11+.
"""

from __future__ import annotations

import sys


def main() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - this module is for the Pythons the rest does not support
        version = ".".join(map(str, sys.version_info[:2]))
        sys.stderr.write(
            f"error: the sparktap command needs Python 3.11 or newer, this is {version}: here only the listener's "
            "relay is installed; print the listener jar with `python -m sparktap.listener --spark-version X.Y`\n"
        )
        sys.exit(2)
    from sparktap.cli import main as cli_main

    cli_main()
