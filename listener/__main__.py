"""``python -m sparktap.listener [--spark-version X.Y]``: print the listener jar for a Spark version.

The same as ``sparktap listener-jar``, for driver hosts where only the relay is installed (Python 3.9+, no click):
a cluster init script can run ``pip install sparktap`` and ``python3 -m sparktap.listener --spark-version 3.5``.
"""

from __future__ import annotations

import argparse
import sys

from sparktap.errors import SparktapError
from sparktap.listener import jar_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparktap.listener", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spark-version", default=None, help="the cluster's Spark version (3.3-3.5 or 4.x); default: pyspark's"
    )
    args = parser.parse_args(argv)
    try:
        print(jar_path(args.spark_version))
    except SparktapError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
