"""``SPARKTAP_LISTENER_LINES`` chooses the listener jars a build makes (``make demo``: the Spark 4 one only); unset,
a build makes every line's jar, which is what the package ships."""

from __future__ import annotations

import pytest

from sparktap.listener import javabuild


def test_unset_or_empty_means_every_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(javabuild.LINES_ENV, raising=False)
    assert [line.name for line in javabuild.selected_lines()] == ["spark3", "spark4"]
    monkeypatch.setenv(javabuild.LINES_ENV, " ")
    assert [line.name for line in javabuild.selected_lines()] == ["spark3", "spark4"]


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("spark4", ["spark4"]),
        (" spark3 ", ["spark3"]),
        ("spark4,spark3", ["spark3", "spark4"]),
        ("spark4,", ["spark4"]),
    ],
)
def test_named_lines_only_in_line_order(monkeypatch: pytest.MonkeyPatch, value: str, names: list[str]) -> None:
    monkeypatch.setenv(javabuild.LINES_ENV, value)
    assert [line.name for line in javabuild.selected_lines()] == names


@pytest.mark.parametrize("value", ["spark5", "spark4,scala", ","])
def test_an_unknown_name_is_one_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(javabuild.LINES_ENV, value)
    with pytest.raises(javabuild.JavaBuildError) as info:
        javabuild.selected_lines()
    message = str(info.value)
    assert message.startswith(f'cannot choose the listener jars to build SPARKTAP_LISTENER_LINES="{value}": ')
    assert "['spark3', 'spark4']" in message and "\n" not in message
