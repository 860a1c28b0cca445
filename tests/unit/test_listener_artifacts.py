"""The listener jars as built: one per Spark line, their class-file versions, and the line each says it is for."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from sparktap.listener import javabuild


def class_versions(jar: Path) -> dict[str, int]:
    """Class name -> class-file major version (52 = Java 8, 61 = Java 17)."""
    out = {}
    with zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if name.endswith(".class"):
                magic, _minor, major = struct.unpack(">IHH", z.read(name)[:8])
                assert magic == 0xCAFEBABE, name
                out[name] = major
    return out


@pytest.fixture(scope="module")
def jars() -> dict[str, Path]:
    """The jars the package build made (``make setup`` / the wheel build)."""
    built = {line.name: javabuild.JAR_DIR / line.jar_name for line in javabuild.LINES.values()}
    missing = [str(p) for p in built.values() if not p.is_file()]
    assert not missing, f"listener jars not built: {missing}; run `make jar`"
    return built


def test_the_spark3_jar_is_java8_throughout(jars: dict[str, Path]) -> None:
    versions = class_versions(jars["spark3"])
    assert "io/sparktap/listener/SparkTapListener.class" in versions
    assert len(versions) >= 20
    above = {name: v for name, v in versions.items() if v > 52}
    assert above == {}


def test_the_spark4_jar_targets_java17_behind_a_java8_entry_class(jars: dict[str, Path]) -> None:
    own = f"{javabuild.PACKAGE}/"
    versions = {name: v for name, v in class_versions(jars["spark4"]).items() if name.startswith(own)}
    java8 = {name for name, v in versions.items() if v == 52}
    assert java8 == {
        "io/sparktap/listener/SparkTapListener.class",
        "io/sparktap/listener/SparkTapListener$Callback.class",
        "io/sparktap/listener/SparkLine.class",
    }
    assert {v for name, v in versions.items() if name not in java8} == {61}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("spark3", "artifact=sparktap-listener-spark3_2.12\nspark.major=3\nspark.min.minor=3\nscala.binary=2.12\n"
                   "java.release=8\n"),
        ("spark4", "artifact=sparktap-listener-spark4_2.13\nspark.major=4\nspark.min.minor=0\nscala.binary=2.13\n"
                   "java.release=17\n"),
    ],
)  # fmt: skip
def test_each_jar_says_which_line_it_is_for(jars: dict[str, Path], name: str, expected: str) -> None:
    with zipfile.ZipFile(jars[name]) as z:
        assert z.read("io/sparktap/listener/build.properties").decode() == expected
    assert jars[name].name == f"sparktap-listener-{name}_{'2.12' if name == 'spark3' else '2.13'}.jar"


@pytest.mark.parametrize("name", ["spark3", "spark4"])
def test_each_jar_carries_the_kafka_client_relocated_without_what_spark_ships(jars: dict[str, Path], name: str) -> None:
    """kafka-clients is merged in under io.sparktap.shaded.kafka (Java 8 classes, its service files renamed too);
    zstd-jni, lz4, snappy and slf4j are left to the Spark the jar runs in."""
    with zipfile.ZipFile(jars[name]) as z:
        names = z.namelist()
        shaded = "io/sparktap/shaded/kafka/clients/producer/KafkaProducer.class"
        assert shaded in names
        assert not [n for n in names if n.startswith(("org/", "com/", "net/", "kafka/common")) and n.endswith(".class")]
        assert not [n for n in names if n.startswith("META-INF/services/org.apache.kafka")]
        assert b"org/apache/kafka/" not in z.read(shaded)
        assert b"io/sparktap/shaded/kafka/" in z.read("io/sparktap/listener/KafkaSettings.class")
        assert b"org.apache.kafka" not in z.read("io/sparktap/listener/KafkaSettings.class")
    versions = class_versions(jars[name])
    assert {v for n, v in versions.items() if n.startswith("io/sparktap/shaded/")} == {52}
