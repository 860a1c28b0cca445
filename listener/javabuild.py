"""Compile the Java listener once per Spark line: one jar for Spark 3.3–3.5 (Scala 2.12), one for Spark 4.x (2.13).

Why two jars: Java code that calls Scala-typed Spark accessors (``stageIds()``, ``SparkPlanInfo.children()``) links
against the Scala collection type of one Scala line only (``scala.collection.Seq`` in 2.12,
``scala.collection.immutable.Seq`` in 2.13), and Spark 3.x drivers still run on Java 8 while Spark 4 needs 17.
The same sources compile for both; each jar carries ``build.properties`` naming its line, and the listener's
entry class (compiled for Java 8 in both jars) refuses to run on another line with one clear log line.

Compile class paths, per line, first found:

1. ``SPARKTAP_SPARK3_JARS`` / ``SPARKTAP_SPARK4_JARS``: a folder of jars (e.g. a Spark distribution's ``jars/``);
2. Spark 4 only: the jars inside the installed pyspark 4 wheel (or ``$SPARK_HOME/jars`` of a Spark 4);
3. Maven: the line's oldest supported Spark API jars (Spark 3.3.4 / 4.0.0), fetched once with ``mvn`` into
   ``$XDG_CACHE_HOME/sparktap/spark-api/<line>`` (``~/.cache`` by default).

Each jar carries its own Kafka producer: ``org.apache.kafka:kafka-clients`` (3.9.x, the last line that runs on
Java 8, so one version serves both jars) is merged in by ``maven-shade-plugin`` and relocated to
``io.sparktap.shaded.kafka`` (class names in strings and ``META-INF/services`` too), so it never meets another
Kafka client on the application's class path. Its compression and logging libraries (zstd-jni, lz4-java,
snappy-java, slf4j) are not bundled: every Spark ships them and the client finds them at run time. The generated
pom and the client jar are cached under ``$XDG_CACHE_HOME/sparktap/`` like the Spark API jars; a build therefore
always needs ``mvn`` (Maven Central, or its local repository ``~/.m2`` once filled).

``SPARKTAP_LISTENER_LINES`` (e.g. ``spark4``) limits a build to those lines: ``make demo`` builds only the jar its
Spark 4 runs, so it needs no Spark 3 API jars; a package build without it ships both.

Used by the package build (setup.py) and by ``sparktap listener-jar --rebuild``. It imports nothing from sparktap
so that setup.py can load it before the package is installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess  # noqa: S404 - javac and mvn are the tools this module exists to run
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
JAVA_SOURCES = HERE / "java"
JAR_DIR = HERE / "jars"
PACKAGE = "io/sparktap/listener"
RESOURCE_SUFFIXES = (".txt",)
KAFKA_CLIENTS = ("org.apache.kafka", "kafka-clients", "3.9.1")
SHADE_PLUGIN = ("org.apache.maven.plugins", "maven-shade-plugin", "3.6.0")
SHADED_KAFKA = "io.sparktap.shaded.kafka"
FACADE = ("SparkTapListener", "SparkLine")
"""Classes compiled for Java 8 in every jar: Spark loads the entry class, which checks the line before anything
that could fail to load (a Java 17 class on Java 11) or to link (the other Scala line)."""


@dataclass(frozen=True)
class Line:
    name: str
    spark_major: int
    spark_min_minor: int
    scala: str
    release: int
    maven_spark: str
    maven_extra: tuple[tuple[str, str, str], ...]

    @property
    def artifact(self) -> str:
        return f"sparktap-listener-{self.name}_{self.scala}"

    @property
    def jar_name(self) -> str:
        return self.artifact + ".jar"

    @property
    def env(self) -> str:
        return f"SPARKTAP_{self.name.upper()}_JARS"

    def maven_artifacts(self) -> list[tuple[str, str, str]]:
        spark = [("org.apache.spark", f"spark-{m}_{self.scala}", self.maven_spark) for m in ("core", "sql", "catalyst")]
        return spark + list(self.maven_extra)


LINES: dict[str, Line] = {
    "spark3": Line(
        name="spark3", spark_major=3, spark_min_minor=3, scala="2.12", release=8, maven_spark="3.3.4",
        maven_extra=(
            ("org.scala-lang", "scala-library", "2.12.15"),
            ("org.slf4j", "slf4j-api", "1.7.32"),
            ("com.fasterxml.jackson.core", "jackson-core", "2.13.4"),
            ("com.fasterxml.jackson.core", "jackson-databind", "2.13.4"),
            ("org.apache.hadoop", "hadoop-client-api", "3.3.2"),  # ReplayFiles: logs through Hadoop's FileSystem
        ),
    ),
    "spark4": Line(
        name="spark4", spark_major=4, spark_min_minor=0, scala="2.13", release=17, maven_spark="4.0.0",
        maven_extra=(
            ("org.apache.spark", "spark-common-utils_2.13", "4.0.0"),
            ("org.scala-lang", "scala-library", "2.13.16"),
            ("org.slf4j", "slf4j-api", "2.0.16"),
            ("com.fasterxml.jackson.core", "jackson-core", "2.18.2"),
            ("com.fasterxml.jackson.core", "jackson-databind", "2.18.2"),
        ),
    ),
}  # fmt: skip


class JavaBuildError(RuntimeError):
    """The listener jar could not be built."""


def line_for(spark_version: str) -> Line:
    """The line whose jar runs on this Spark version ("3.5.9", "4.0"); JavaBuildError when none does."""
    match = re.match(r"(\d+)\.(\d+)", spark_version.strip())
    if match:
        major, minor = int(match.group(1)), int(match.group(2))
        if major == 3 and minor >= LINES["spark3"].spark_min_minor:
            return LINES["spark3"]
        if major >= 4:
            return LINES["spark4"]
    raise JavaBuildError(
        f'no sparktap listener for Spark version="{spark_version}": supported are Spark 3.3-3.5 (Scala 2.12) '
        "and Spark 4.x (Scala 2.13)"
    )


def _pyspark_jars() -> tuple[str, Path] | None:
    """(version, jars dir) of $SPARK_HOME or else the installed pyspark, if either is there."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        jars = Path(home) / "jars"
        core = sorted(jars.glob("spark-core_*.jar"))
        version = core[0].stem.split("-")[-1] if core else ""
        return version, jars
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        jars = Path(spec.origin).parent / "jars"
        core = sorted(jars.glob("spark-core_*.jar"))
        if core:
            return core[0].stem.split("-")[-1], jars
    return None


def maven_dir(line: Line) -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "sparktap" / "spark-api" / f"{line.name}-{line.maven_spark}"


def fetch_maven(artifacts: list[tuple[str, str, str]], out: Path, what: str) -> Path:
    """Copy these artifacts (no transitive dependencies) from Maven into ``out`` once; return ``out``."""
    stamp = out / ".complete"
    wanted = "\n".join(":".join(a) for a in artifacts)
    if stamp.is_file() and stamp.read_text() == wanted:
        return out
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JavaBuildError(f"cannot fetch {what} from Maven: mvn is not installed (Debian: apt-get install maven)")
    deps = "".join(
        f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>"
        for g, a, v in artifacts
    )
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>io.sparktap.build</groupId><artifactId>fetch</artifactId><version>1</version>"
        f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>"
    )
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sparktap-mvn-") as tmp:
        (Path(tmp) / "pom.xml").write_text(pom)
        cmd = [mvn, "-q", "-B", "-f", str(Path(tmp) / "pom.xml"), "dependency:copy-dependencies",
               "-DexcludeTransitive=true", f"-DoutputDirectory={out}"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise JavaBuildError(f"mvn could not fetch {what} (exit {proc.returncode}):\n{tail}")
    stamp.write_text(wanted)
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparktap"


def kafka_clients_jar() -> Path:
    """The unshaded kafka-clients jar the sources compile against (fetched once)."""
    group, artifact, version = KAFKA_CLIENTS
    out = fetch_maven([KAFKA_CLIENTS], cache_dir() / f"kafka-clients-{version}", f"{artifact} {version}")
    return out / f"{artifact}-{version}.jar"


def shade_pom() -> str:
    """A pom whose jar is the compiled listener (``-Dsparktap.classes``) with kafka-clients merged and relocated."""
    g, a, v = KAFKA_CLIENTS
    sg, sa, sv = SHADE_PLUGIN
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>io.sparktap.build</groupId><artifactId>listener-shade</artifactId><version>1</version>
<properties><project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
<dependencies><dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>
</dependencies>
<build><directory>${{sparktap.target}}</directory><outputDirectory>${{sparktap.classes}}</outputDirectory>
<plugins><plugin><groupId>{sg}</groupId><artifactId>{sa}</artifactId><version>{sv}</version>
<executions><execution><phase>package</phase><goals><goal>shade</goal></goals><configuration>
<createDependencyReducedPom>false</createDependencyReducedPom>
<artifactSet><includes><include>{g}:{a}</include></includes></artifactSet>
<relocations><relocation><pattern>org.apache.kafka</pattern><shadedPattern>{SHADED_KAFKA}</shadedPattern>
</relocation></relocations>
<transformers><transformer implementation="org.apache.maven.plugins.shade.resource.ServicesResourceTransformer"/>
</transformers>
<filters><filter><artifact>{g}:{a}</artifact><excludes><exclude>META-INF/MANIFEST.MF</exclude>
<exclude>META-INF/*.SF</exclude><exclude>META-INF/*.DSA</exclude><exclude>META-INF/*.RSA</exclude>
<exclude>META-INF/versions/**</exclude><exclude>common/message/*.json</exclude></excludes></filter>
<filter><artifact>*:*</artifact><excludes><exclude>META-INF/maven/**</exclude></excludes></filter></filters>
</configuration></execution></executions></plugin></plugins></build></project>
"""


def _shade(classes: Path, out_jar: Path) -> None:
    """Package ``classes`` into ``out_jar`` with kafka-clients merged in and relocated (maven-shade-plugin)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JavaBuildError(
            "cannot merge the Kafka client into the listener jar: mvn is not installed (Debian: apt-get install maven)"
        )
    pom_dir = cache_dir() / "shade"
    pom_dir.mkdir(parents=True, exist_ok=True)
    pom = pom_dir / "pom.xml"
    text = shade_pom()
    if not pom.is_file() or pom.read_text() != text:
        pom.write_text(text)
    with tempfile.TemporaryDirectory(prefix="sparktap-shade-") as target:
        cmd = [mvn, "-q", "-B", "-f", str(pom), "package", "-DskipTests", f"-Dsparktap.classes={classes}",
               f"-Dsparktap.target={target}"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
        shaded = Path(target) / "listener-shade-1.jar"
        if proc.returncode != 0 or not shaded.is_file():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise JavaBuildError(
                f"mvn could not shade the Kafka client into the listener (exit {proc.returncode}):\n{tail}"
            )
        shutil.copyfile(shaded, out_jar)


def compile_classpath(line: Line) -> Path:
    """The folder of jars this line is compiled against (see the module docstring for the order)."""
    override = os.environ.get(line.env)
    if override:
        if not Path(override).is_dir():
            raise JavaBuildError(f'{line.env}="{override}" is not a folder of Spark jars')
        return Path(override)
    if line.spark_major == 4:
        found = _pyspark_jars()
        if found is not None and found[0].startswith("4."):
            return found[1]
    return fetch_maven(line.maven_artifacts(), maven_dir(line), f"the Spark {line.maven_spark} API jars")


def sources() -> list[Path]:
    return sorted(JAVA_SOURCES.rglob("*.java"))


def resources() -> list[Path]:
    """Files next to the sources that go into the jar as they are (the shared redaction patterns)."""
    return sorted(p for p in JAVA_SOURCES.rglob("*") if p.is_file() and p.suffix in RESOURCE_SUFFIXES)


def source_digest(line: Line) -> str:
    digest = hashlib.sha256(repr(line).encode() + repr((KAFKA_CLIENTS, SHADE_PLUGIN)).encode())
    for path in sources() + resources():
        digest.update(str(path.relative_to(JAVA_SOURCES)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_properties(line: Line) -> str:
    return (
        f"artifact={line.artifact}\nspark.major={line.spark_major}\nspark.min.minor={line.spark_min_minor}\n"
        f"scala.binary={line.scala}\njava.release={line.release}\n"
    )


def _javac(release: int, classpath: str, out: Path, srcs: list[Path]) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise JavaBuildError("javac not found: install a JDK 17 or newer (Debian: openjdk-17-jdk-headless)")
    cmd = [javac, "--release", str(release), "-nowarn", "-Xlint:-options", "-encoding", "UTF-8", "-cp", classpath,
           "-d", str(out), *map(str, srcs)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise JavaBuildError(f"javac --release {release} failed (exit {proc.returncode}):\n{proc.stderr}")


def build_jar(line: Line, out_dir: Path = JAR_DIR, force: bool = False) -> Path:
    """Compile the sources into ``out_dir/<artifact>.jar`` for this line; skip when nothing changed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jar_path = out_dir / line.jar_name
    stamp = out_dir / (line.jar_name + ".sha256")
    digest = source_digest(line)
    if not force and jar_path.is_file() and stamp.is_file() and stamp.read_text().strip() == digest:
        return jar_path
    srcs = sources()
    if not srcs:
        raise JavaBuildError(f'no Java sources under dir="{JAVA_SOURCES}"')
    classpath = f"{compile_classpath(line) / '*'}:{kafka_clients_jar()}"
    with tempfile.TemporaryDirectory(prefix="sparktap-javac-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        _javac(line.release, classpath, classes, srcs)
        if line.release > 8:
            facade = [s for s in srcs if s.stem in FACADE]
            _javac(8, f"{classes}:{classpath}", classes, facade)
        (classes / PACKAGE / "build.properties").write_text(build_properties(line))
        for res in resources():
            target = classes / res.relative_to(JAVA_SOURCES)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(res, target)
        tmp_jar = out_dir / (line.jar_name + ".tmp")
        _shade(classes, tmp_jar)
        tmp_jar.replace(jar_path)
    stamp.write_text(digest + "\n")
    return jar_path


LINES_ENV = "SPARKTAP_LISTENER_LINES"


def selected_lines() -> list[Line]:
    """The lines named in ``SPARKTAP_LISTENER_LINES`` (comma-separated), else every line."""
    raw = os.environ.get(LINES_ENV, "").strip()
    if not raw:
        return list(LINES.values())
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in LINES]
    if unknown or not names:
        raise JavaBuildError(
            f'cannot choose the listener jars to build {LINES_ENV}="{raw}": no listener line named {unknown}; '
            f'use names of {sorted(LINES)} separated by commas (e.g. "spark4"), or unset it to build every jar'
        )
    return [LINES[name] for name in LINES if name in names]


def build_jars(out_dir: Path = JAR_DIR, force: bool = False) -> list[Path]:
    """Every line's jar (the package build ships both), or those of ``SPARKTAP_LISTENER_LINES``."""
    return [build_jar(line, out_dir, force) for line in selected_lines()]


if __name__ == "__main__":
    for built in build_jars(force=True):
        print(built)
