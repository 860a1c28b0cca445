"""The test services' Maven jars (tests.support.services.maven) without running mvn: the throwaway pom, the cache
location, and what a cold cache says."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from sparktap.errors import ServiceError
from tests.support.services import maven

NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def test_the_pom_lists_each_artifact_as_a_dependency() -> None:
    text = maven._pom(["org.apache.kafka:kafka_2.13:4.1.0", "org.slf4j:slf4j-simple:1.7.36"])
    pom = ElementTree.fromstring(text)  # noqa: S314 - the text we just rendered
    deps = [
        tuple(d.findtext(f"m:{k}", namespaces=NS) for k in ("groupId", "artifactId", "version"))
        for d in pom.findall("m:dependencies/m:dependency", NS)
    ]
    assert deps == [("org.apache.kafka", "kafka_2.13", "4.1.0"), ("org.slf4j", "slf4j-simple", "1.7.36")]


@pytest.mark.parametrize("coordinate", ["org.apache.kafka:kafka_2.13", "a:b:c:d", "a::1"])
def test_a_coordinate_that_is_not_group_artifact_version_is_refused(coordinate: str) -> None:
    with pytest.raises(ValueError, match="is not group:artifact:version"):
        maven._pom([coordinate])


def test_the_cache_is_sparktap_cache_dir_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARKTAP_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert maven.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("SPARKTAP_CACHE_DIR")
    assert maven.cache_dir() == tmp_path / "xdg" / "sparktap"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert maven.cache_dir() == tmp_path / "home" / ".cache" / "sparktap"


def test_a_cold_cache_without_install_names_the_directory_and_the_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPARKTAP_CACHE_DIR", str(tmp_path))
    with pytest.raises(ServiceError) as info:
        maven.jars("kafka-9.9.9", ["org.apache.kafka:kafka_2.13:9.9.9"], install=False)
    assert str(info.value) == (
        f'jars name="kafka-9.9.9" are not cached in path="{tmp_path / "jars" / "kafka-9.9.9"}"; '
        "fetch them with `make setup`"
    )


def test_a_complete_cache_is_used_without_mvn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARKTAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "")  # no mvn to run
    cached = tmp_path / "jars" / "x-1"
    cached.mkdir(parents=True)
    for name in ("b.jar", "a.jar"):
        (cached / name).write_bytes(b"")
    (cached / ".complete").write_text("g:x:1\n")
    assert maven.jars("x-1", ["g:x:1"]) == [cached / "a.jar", cached / "b.jar"]


def test_without_mvn_a_fetch_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARKTAP_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "")
    with pytest.raises(ServiceError, match=r"mvn not found; install Maven \(Debian: apt-get install maven"):
        maven.jars("x-2", ["g:x:2"])
