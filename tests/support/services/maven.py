"""Jars from Maven Central for local services and benchmarks, fetched once with `mvn` and cached.

`jars("kafka-4.1.0", ["org.apache.kafka:kafka_2.13:4.1.0", ...])` writes a throwaway pom listing the artifacts,
runs `mvn dependency:copy-dependencies` (mvn's default repository and its ~/.m2 cache) into
`<cache>/jars/<name>/`, and marks the directory complete; later calls return the cached jars without running mvn.
The cache is `$SPARKTAP_CACHE_DIR`, else `$XDG_CACHE_HOME/sparktap`, else `~/.cache/sparktap`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

from sparktap.errors import ServiceError

_DONE = ".complete"
MVN_HINT = "install Maven (Debian: apt-get install maven; `make setup` does it as root)"


def cache_dir() -> Path:
    explicit = os.environ.get("SPARKTAP_CACHE_DIR", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "sparktap"


def _pom(artifacts: Sequence[str]) -> str:
    deps = []
    for coordinate in artifacts:
        parts = coordinate.split(":")
        if len(parts) != 3 or not all(parts):
            raise ValueError(f'artifact="{coordinate}" is not group:artifact:version')
        group, artifact, version = (escape(p) for p in parts)
        deps.append(
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n  <modelVersion>4.0.0</modelVersion>\n'
        "  <groupId>sparktap.local</groupId><artifactId>jars</artifactId><version>1</version>\n"
        "  <dependencies>\n" + "\n".join(deps) + "\n  </dependencies>\n</project>\n"
    )


def jars(name: str, artifacts: Sequence[str], *, install: bool = True, timeout: float = 900.0) -> list[Path]:
    """The jars of `artifacts` and their runtime dependencies, cached under `<cache>/jars/<name>/`.

    With `install=False` a missing cache raises ServiceError instead of running mvn.
    """
    target = cache_dir() / "jars" / name
    if (target / _DONE).is_file():
        return sorted(target.glob("*.jar"))
    if not install:
        raise ServiceError(f'jars name="{name}" are not cached in path="{target}"; fetch them with `make setup`')
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ServiceError(f'cannot fetch jars name="{name}" ({", ".join(artifacts)}): mvn not found; {MVN_HINT}')
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"sparktap-mvn-{name}-", dir=target.parent) as work:
        pom = Path(work) / "pom.xml"
        pom.write_text(_pom(artifacts))
        out = Path(work) / "jars"
        command = [
            mvn, "-B", "-q", "-f", str(pom), "dependency:copy-dependencies",
            "-DincludeScope=runtime", f"-DoutputDirectory={out}",
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(f'mvn did not fetch jars name="{name}" within {timeout:g}s; check the network') from exc
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise ServiceError(
                f'mvn failed fetching jars name="{name}" ({", ".join(artifacts)}) with code {done.returncode}; '
                f"check that Maven can reach its repository. mvn said:\n{tail}"
            )
        (out / _DONE).write_text("\n".join(artifacts) + "\n")
        if target.exists():  # a concurrent fetch finished first: keep its copy
            shutil.rmtree(out, ignore_errors=True)
        else:
            out.rename(target)
    return sorted(target.glob("*.jar"))


def classpath(paths: Sequence[Path]) -> str:
    return os.pathsep.join(str(p) for p in paths)
