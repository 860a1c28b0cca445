"""Who owns a finding or an application's cost: the platform's team mapping (issue 41, item 8).

A Spark user chooses their own tags (``spark.sparktap.tag.team``, ``spark.addTag``): trusted as the owner, a tag
would let anyone route their findings to another team's channel, fall under that team's silences and move their cost
to it. The mapping is the platform team's: rules in order, the first that matches decides::

    teams:                                    # in the routing file; for `sparktap cost` also SPARKTAP_COST__TEAMS
      - {cluster: "pay-*", team: payments}    # every key given must match (globs, as routes' app_name)
      - {user: [alice, bob], team: data-eng}  # the Connect user, else the application's Spark user
      - {app_name: "nightly-*", team: data-eng}
      - {cluster: "shared-*", trust_tag: true}          # there, the job's own team tag decides …
      - {cluster: dev, trust_tag: [payments, ml]}       # … or only these values of it

A ``team`` rule owns what it matches (tags are then shown, not trusted); a ``trust_tag`` rule matches only what
carries an allowed tag (the application's ``team`` tag, or a job tag for routes and silences), and that tag owns it;
what no rule takes has no owner (the default route; ``(unmapped)`` in ``sparktap cost``). Without a mapping every
tag is trusted, as before: right for a single-team install, and ``sparktap alert``/``cost`` say so in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, field_validator, model_validator

from sparktap.detection.globs import glob_matches, glob_regex
from sparktap.schemas.ddl import quote_literal

TRUSTED_TAGS_WARNING = (
    "warning: no team mapping (teams: in the routing file, SPARKTAP_COST__TEAMS): user-set team tags decide "
    "routing, silences and cost; see docs/security.md"
)
UNMAPPED = "(unmapped)"
"""``sparktap cost``'s key for what no rule of the mapping takes."""

TeamName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$")]


def _listed(value: Any) -> Any:
    """A scalar where a list is expected: a list of one (``cluster: prod`` is ``cluster: [prod]``)."""
    return [value] if isinstance(value, str) else value


Globs = Annotated[tuple[str, ...], BeforeValidator(_listed, json_schema_input_type=str | list[str])]


class TeamRule(BaseModel):
    """One rule of the team mapping: what it matches and who then owns it (``team``), or which of the finding's own
    tags may (``trust_tag``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster: Globs = Field(default=(), description="cluster globs (any of)")
    user: Globs = Field(default=(), description="Spark Connect user, else the application's Spark user: globs")
    app_name: Globs = Field(default=(), description="application name globs (any of)")
    team: TeamName | None = Field(default=None, description="the owner of what this rule matches")
    trust_tag: bool | tuple[TeamName, ...] = Field(
        default=False, description="true: the finding's own team tag owns it; a list: only these tag values"
    )

    @field_validator("cluster", "user", "app_name")
    @classmethod
    def _globs(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for glob in value:
            if not glob:
                raise ValueError("an empty glob matches nothing; leave the key out to match everything")
            glob_regex(glob)  # ValueError: the one clear reason
        return value

    @model_validator(mode="after")
    def _one_owner(self) -> TeamRule:
        if (self.team is None) == (not self.trust_tag):
            raise ValueError("give exactly one of team: NAME or trust_tag: true (or a list of team names)")
        return self

    def matches(self, cluster: str, user: str, app_name: str) -> bool:
        return all(
            not globs or any(glob_matches(value, g) for g in globs)
            for globs, value in ((self.cluster, cluster), (self.user, user), (self.app_name, app_name))
        )

    def allows(self, tag: str) -> bool:
        """Whether this (``trust_tag``) rule lets the tag value ``tag`` own what it matches."""
        return bool(tag) and (self.trust_tag is True or (isinstance(self.trust_tag, tuple) and tag in self.trust_tag))


TeamRules = tuple[TeamRule, ...]


def owner(
    rules: TeamRules | None, cluster: str, user: str, app_name: str, tag: str, job_tags: Sequence[str] = ()
) -> tuple[str, tuple[str, ...]]:
    """(owning team, the job tags that may stand for a team) of a finding: without ``rules`` the tags as they are;
    with them, the first rule's answer, ``("", ())`` when none takes it."""
    if rules is None:
        return tag, tuple(job_tags)
    for rule in rules:
        if not rule.matches(cluster, user, app_name):
            continue
        if rule.team is not None:
            return rule.team, ()
        trusted = tuple(t for t in job_tags if rule.allows(t))
        if rule.allows(tag) or trusted:
            return (tag if rule.allows(tag) else ""), trusted
    return "", ()


def _any_glob(column: str, globs: tuple[str, ...]) -> str:
    return "(" + " OR ".join(f"match({column}, {quote_literal('^(?:' + glob_regex(g) + ')$')})" for g in globs) + ")"


def owner_sql(rules: TeamRules | None, cluster: str, user: str, app_name: str, tag: str) -> str:
    """``owner`` as a ClickHouse expression over the named columns (18.16 and chDB: ``multiIf``, ``match``, RE2 - the
    same regular expressions as ``glob_regex`` makes for Python), ``UNMAPPED`` when no rule takes the row."""
    if rules is None:
        return tag
    arms: list[str] = []
    for rule in rules:
        conds = [_any_glob(col, globs) for col, globs in ((cluster, rule.cluster), (user, rule.user)) if globs]
        conds += [_any_glob(app_name, rule.app_name)] if rule.app_name else []
        if rule.team is not None:
            value = quote_literal(rule.team)
        else:
            allowed = (
                f"{tag} != ''"
                if rule.trust_tag is True
                else f"has([{', '.join(quote_literal(t) for t in rule.trust_tag or ())}], {tag})"
            )
            conds.append(allowed)
            value = tag
        arms += [" AND ".join(conds) or "1", value]
    return f"multiIf({', '.join(arms)}, {quote_literal(UNMAPPED)})"
