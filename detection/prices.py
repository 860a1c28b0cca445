"""Cost settings (issue 25): what a core-hour and a GiB-hour of executor memory cost, per cluster, with a default.

Composed into ``sparktap.detection.settings.DetectionSettings`` as ``cost``: ``SPARKTAP_COST__CORE_HOUR=0.048``,
``SPARKTAP_COST__GIB_HOUR=0.0053``, ``SPARKTAP_COST__CURRENCY=EUR``, per cluster
``SPARKTAP_COST__CLUSTERS='{"prod-eu": {"core_hour": 0.06, "gib_hour": 0.007}}'`` and who pays
``SPARKTAP_COST__TEAMS='[{"cluster": "pay-*", "team": "payments"}]'`` (the team mapping, ``teams.py``). The prices
are rendered into the utilisation SQL as typed literals (``detection/sql.lit``), so a Grafana panel, ``sparktap
cost`` and the report compute the same figure; cluster names are checked as identifiers before they reach SQL.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sparktap.detection.sql import lit
from sparktap.detection.teams import TeamRule
from sparktap.schemas.types import IDENTIFIER_PATTERN, IDENTIFIER_RULE

Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class ClusterPrice(BaseModel):
    """The prices of one cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    core_hour: Price = Field(description="price of one executor core held for one hour")
    gib_hour: Price = Field(default=0.0, description="price of one GiB of executor memory held for one hour")


class CostSettings(BaseModel):
    """Prices of allocated executor resources; ``clusters`` overrides the default per cluster."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    core_hour: Price = Field(default=0.0, description="default price of one executor core-hour")
    gib_hour: Price = Field(default=0.0, description="default price of one GiB-hour of executor memory")
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code, shown beside figures")
    clusters: dict[str, ClusterPrice] = Field(default_factory=dict, description="per-cluster prices")
    teams: tuple[TeamRule, ...] | None = Field(
        default=None,
        description="the team mapping of `sparktap cost --by team` (teams.py; SPARKTAP_COST__TEAMS as JSON); "
        "None: the routing file's teams:, else the team tags as set",
    )

    @field_validator("clusters")
    @classmethod
    def _cluster_names(cls, value: dict[str, ClusterPrice]) -> dict[str, ClusterPrice]:
        for name in value:
            if not re.fullmatch(IDENTIFIER_PATTERN, name):
                raise ValueError(f"cluster name {name!r} is not an identifier ({IDENTIFIER_RULE})")
        return value

    @property
    def priced(self) -> bool:
        """Whether any price is set (otherwise cost is 0 and ``sparktap cost`` says how to set prices)."""
        return bool(self.core_hour or self.gib_hour or self.clusters)

    def core_hour_of(self, cluster: str) -> tuple[float, bool]:
        """(core-hour price of ``cluster``, whether it is the cluster's own rather than the default)."""
        own = self.clusters.get(cluster)
        return (own.core_hour, True) if own is not None else (self.core_hour, False)

    def price_sql(self, kind: str, cluster: str = "cluster") -> str:
        """The price (``core_hour`` or ``gib_hour``) of the row's cluster as SQL: ``transform`` over the per-cluster
        prices, the default otherwise (works on 18.16 and chDB)."""
        if kind not in ("core_hour", "gib_hour"):
            raise ValueError(f"unknown price {kind!r}")
        default = lit(float(getattr(self, kind)))
        if not self.clusters:
            return default
        names = "[" + ", ".join(lit(n) for n in self.clusters) + "]"
        values = "[" + ", ".join(lit(float(getattr(p, kind))) for p in self.clusters.values()) + "]"
        return f"transform({cluster}, {names}, {values}, {default})"


DEFAULT_COST = CostSettings()
