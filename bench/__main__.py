"""``python -m bench [name ...]``: run every benchmark module in bench/ (or the named ones), one after another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = sorted(p.stem for p in here.glob("*.py") if not p.stem.startswith("_"))
    chosen = [n for n in names if not argv or n in argv]
    failed = 0
    for name in chosen:
        print(f"== bench.{name}", flush=True)
        code = subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=here.parent, check=False).returncode
        if code != 0:
            print(f"bench.{name} exited with {code}", flush=True)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
