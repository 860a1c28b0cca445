"""Compile the Java listener against the jars that ship inside the pyspark wheel.

Used by the package build (setup.py) and by ``sparktap listener-jar --rebuild``. It imports nothing
from sparktap so that setup.py can load it before the package is installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess  # noqa: S404 - javac is the tool this module exists to run
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
JAVA_SOURCES = HERE / "java"
JAR_DIR = HERE / "jars"
JAR_NAME = "sparktap-listener.jar"
RELEASE = "17"


class JavaBuildError(RuntimeError):
    """The listener jar could not be built."""


def spark_jars_dir() -> Path:
    """Where Spark's own jars are: $SPARK_HOME/jars, else the installed pyspark wheel."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        jars = Path(spec.origin).parent / "jars"
        if jars.is_dir():
            return jars
    raise JavaBuildError(
        "cannot find Spark's jars to compile the listener against: install pyspark (pip install 'pyspark>=4,<5') "
        "or set SPARK_HOME to a Spark 4.x distribution"
    )


def sources() -> list[Path]:
    return sorted(JAVA_SOURCES.rglob("*.java"))


def source_digest() -> str:
    digest = hashlib.sha256()
    for path in sources():
        digest.update(str(path.relative_to(JAVA_SOURCES)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_jar(out_dir: Path = JAR_DIR, force: bool = False) -> Path:
    """Compile the sources into ``out_dir/sparktap-listener.jar``; skip when the sources are unchanged."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jar_path = out_dir / JAR_NAME
    stamp = out_dir / (JAR_NAME + ".sha256")
    digest = source_digest()
    if not force and jar_path.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return jar_path
    javac = shutil.which("javac")
    if javac is None:
        raise JavaBuildError(
            "javac not found: install a JDK 17 or newer (Debian: apt-get install openjdk-17-jdk-headless)"
        )
    srcs = sources()
    if not srcs:
        raise JavaBuildError(f"no Java sources under dir=\"{JAVA_SOURCES}\"")
    classpath = str(spark_jars_dir() / "*")
    with tempfile.TemporaryDirectory(prefix="sparktap-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [javac, "--release", RELEASE, "-nowarn", "-encoding", "UTF-8", "-cp", classpath, "-d", str(classes)]
        cmd += [str(s) for s in srcs]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode != 0:
            raise JavaBuildError(f"javac failed (exit {proc.returncode}):\n{proc.stderr}")
        tmp_jar = out_dir / (JAR_NAME + ".tmp")
        with zipfile.ZipFile(tmp_jar, "w", compression=zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: sparktap\r\n\r\n")
            for cls in sorted(classes.rglob("*")):
                if cls.is_file():
                    jar.write(cls, cls.relative_to(classes).as_posix())
        tmp_jar.replace(jar_path)
    stamp.write_text(digest + "\n")
    return jar_path


if __name__ == "__main__":
    print(build_jar(force=True))
