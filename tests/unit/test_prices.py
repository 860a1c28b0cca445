"""Cost settings (issue 25): SPARKTAP_COST__* from the environment, per-cluster prices as SQL, clear errors."""

from __future__ import annotations

import pytest

from sparktap.config import ConfigError
from sparktap.detection.cost import money
from sparktap.detection.prices import CostSettings
from sparktap.settings import load_settings


def test_prices_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTAP_COST__CORE_HOUR", "0.048")
    monkeypatch.setenv("SPARKTAP_COST__GIB_HOUR", "0.0053")
    monkeypatch.setenv("SPARKTAP_COST__CURRENCY", "EUR")
    monkeypatch.setenv("SPARKTAP_COST__CLUSTERS", '{"prod-eu": {"core_hour": 0.06, "gib_hour": 0.007}}')
    cost = load_settings().cost
    assert (cost.core_hour, cost.gib_hour, cost.currency, cost.priced) == (0.048, 0.0053, "EUR", True)
    assert cost.price_sql("core_hour") == "transform(cluster, ['prod-eu'], [0.06], 0.048)"
    assert cost.price_sql("gib_hour") == "transform(cluster, ['prod-eu'], [0.007], 0.0053)"
    assert CostSettings().price_sql("core_hour") == "0.0" and not CostSettings().priced


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("SPARKTAP_COST__CORE_HOUR", "-1", "invalid setting SPARKTAP_COST__CORE_HOUR: Input should be greater than"),
        ("SPARKTAP_COST__CURRENCY", "euro", "invalid setting SPARKTAP_COST__CURRENCY: String should match pattern"),
        ("SPARKTAP_COST__CLUSTERS", '{"a\'b": {"core_hour": 1}}', 'cluster name "a\'b" is not an identifier'),
    ],
)
def test_bad_prices_are_one_clear_line(monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_money_rounds_half_up_to_the_cent() -> None:
    assert [money(v) for v in (0.014, 0.015, 14.8, 0.0, 1234.5678, -0.016)] == [
        "0.01",
        "0.02",
        "14.80",
        "0.00",
        "1234.57",
        "-0.02",
    ]
