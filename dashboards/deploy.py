"""``sparktap grafana deploy``: create or update everything sparktap provisions, through Grafana's HTTP API with
grafana-client, idempotently.

Order: folder, datasource, dashboards, alert rules (then their group's interval), contact points, notification
policy. Each object is read first and written only when missing or different, so a second deploy changes nothing
(contact points are the exception: Grafana never returns their secret settings, so the configured ones are always
written). The notification policy is merged, not replaced: the sparktap subtree (``source=sparktap``) goes first
among the root's routes and everything else in the organisation's tree stays.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import SecretStr

from sparktap.dashboards.alerts import provisioned_group
from sparktap.dashboards.config import GrafanaConfig
from sparktap.dashboards.contact_points import embedded_contact_points, merge_route, sparktap_route
from sparktap.dashboards.dashboards import all_dashboards, panels_of
from sparktap.dashboards.datasource import ClickHouseEndpoint, datasource_body
from sparktap.dashboards.defaults import APPLICATION_UID, CONTACT_POINT_CHAT, CONTACT_POINT_WEBHOOK
from sparktap.dashboards.routing_export import ROUTE_PREFIX, routing_contact_points, routing_policy
from sparktap.detection.routing import Routing
from sparktap.errors import SparktapError

log = logging.getLogger(__name__)
Action = Literal["created", "updated", "unchanged", "deleted", "skipped"]
T = TypeVar("T")


class DeployError(SparktapError):
    """Grafana refused or could not be reached."""


@dataclass
class DeployReport:
    """What deploy did, object by object."""

    actions: list[tuple[str, str, Action]] = field(default_factory=list)

    def add(self, kind: str, name: str, action: Action) -> None:
        self.actions.append((kind, name, action))
        log.info("grafana %s %s: %s", kind, name, action)

    def count(self, action: Action) -> int:
        return sum(1 for _, _, a in self.actions if a == action)

    def summary(self) -> str:
        parts = [
            f"{self.count(a)} {a}" for a in ("created", "updated", "unchanged", "deleted", "skipped") if self.count(a)
        ]
        return ", ".join(parts) or "nothing to do"


def redact_url(url: str) -> str:
    """scheme://host:port of a URL (no credentials, no path)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}"


def connect(url: str, token: SecretStr, timeout: float = 30.0) -> Any:
    """A grafana-client ``GrafanaApi`` for a base URL and a service-account token."""
    try:
        from grafana_client import GrafanaApi
    except ImportError as exc:  # the 'grafana' extra
        raise DeployError("grafana-client is not installed: pip install 'sparktap[grafana]'") from exc
    if urlsplit(url).scheme not in ("http", "https"):
        raise DeployError(f'invalid Grafana URL url="{redact_url(url)}": use http(s)://host[:port][/path]')
    return GrafanaApi.from_url(url, credential=token.get_secret_value(), timeout=timeout)


def _status(exc: Exception) -> int:
    return int(getattr(exc, "status_code", 0) or 0)


def _same(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether every key we set has the same value in ``current``."""
    return all(current.get(k) == v for k, v in wanted.items())


class Deployer:
    """Deploys sparktap's Grafana objects with a grafana-client ``GrafanaApi``."""

    def __init__(
        self,
        api: Any,
        cfg: GrafanaConfig,
        endpoint: ClickHouseEndpoint,
        channel_urls: Mapping[str, SecretStr] | None = None,
        url: str = "",
        routing: Routing | None = None,
    ) -> None:
        self.api = api
        self.cfg = cfg
        self.endpoint = endpoint
        self.channel_urls = {k: v for k, v in (channel_urls or {}).items() if v.get_secret_value()}
        self.routing = routing
        """the alerter's routing file: contact points and policies route for route (``routing_export.py``)"""
        self.where = redact_url(url) if url else "Grafana"
        self.report = DeployReport()

    def _call(self, what: str, fn: Callable[..., T], *args: Any, missing_ok: bool = False) -> T | None:
        from grafana_client.client import GrafanaException
        from niquests.exceptions import RequestException

        try:
            return fn(*args)
        except RequestException as exc:  # connection refused, DNS, TLS: grafana-client lets these through
            raise DeployError(
                f'cannot reach Grafana url="{self.where}" while trying to {what}: '
                f"{type(exc).__name__}; check --url and that Grafana is up"
            ) from exc
        except GrafanaException as exc:
            status = _status(exc)
            if missing_ok and status == 404:
                return None
            if status == 0:
                raise DeployError(
                    f'cannot reach Grafana url="{self.where}" while trying to {what}: {exc.message}; '
                    "check --url and that Grafana is up"
                ) from exc
            hint = (
                "the token lacks permission: use a service-account token with the Admin role"
                if status in (401, 403)
                else "see the message"
            )
            raise DeployError(
                f'Grafana url="{self.where}" refused to {what}: HTTP {status} {exc.message}; {hint}'
            ) from exc

    # ------------------------------------------------------------------------------------------- steps

    def deploy(self) -> DeployReport:
        self.folder()
        self.datasource()
        self.dashboards()
        self.alert_rules()
        has_chat = self.contact_points()
        self.policy(has_chat)
        return self.report

    def folder(self) -> None:
        current = self._call("read the folder", self.api.folder.get_folder, self.cfg.folder_uid, missing_ok=True)
        if current is None:
            self._call("create the folder", self.api.folder.create_folder, self.cfg.folder_title, self.cfg.folder_uid)
            self.report.add("folder", self.cfg.folder_uid, "created")
        elif current.get("title") != self.cfg.folder_title:
            self._call(
                "rename the folder",
                lambda: self.api.folder.update_folder(
                    self.cfg.folder_uid, title=self.cfg.folder_title, version=current.get("version"), overwrite=True
                ),
            )
            self.report.add("folder", self.cfg.folder_uid, "updated")
        else:
            self.report.add("folder", self.cfg.folder_uid, "unchanged")

    def datasource(self) -> None:
        body = datasource_body(self.endpoint, self.cfg)
        uid = self.cfg.datasource_uid
        current = self._call("read the datasource", self.api.datasource.get_datasource_by_uid, uid, missing_ok=True)
        if current is None:
            self._call("create the datasource", self.api.datasource.create_datasource, body)
            self.report.add("datasource", uid, "created")
            return
        plain = {k: v for k, v in body.items() if k != "secureJsonData"}
        if _same(current, plain) and "secureJsonData" not in body:
            self.report.add("datasource", uid, "unchanged")
            return
        self._call("update the datasource", self.api.datasource.update_datasource_by_uid, uid, body)
        self.report.add("datasource", uid, "updated")

    def dashboards(self) -> None:
        for board in all_dashboards(self.cfg):
            uid = board["uid"]
            current = self._call(f"read dashboard {uid}", self.api.dashboard.get_dashboard, uid, missing_ok=True)
            if current is not None:
                existing = {k: v for k, v in (current.get("dashboard") or {}).items() if k not in ("id", "version")}
                wanted = {k: v for k, v in board.items() if k != "version"}
                folder = (current.get("meta") or {}).get("folderUid")
                if existing == wanted and folder == self.cfg.folder_uid:
                    self.report.add("dashboard", uid, "unchanged")
                    continue
            self._call(
                f"save dashboard {uid}",
                self.api.dashboard.update_dashboard,
                {
                    "dashboard": board,
                    "folderUid": self.cfg.folder_uid,
                    "overwrite": True,
                    "message": "sparktap grafana deploy",
                },
            )
            self.report.add("dashboard", uid, "created" if current is None else "updated")

    def _findings_panel_id(self) -> int | None:
        from sparktap.dashboards.dashboards import application

        board = application(self.cfg)
        assert board["uid"] == APPLICATION_UID  # noqa: S101 - invariant of dashboards.py
        return next((p["id"] for p in panels_of(board) if p.get("title") == "Findings"), None)

    def alert_rules(self) -> None:
        panel_id = self._findings_panel_id()
        group = provisioned_group(self.cfg, panel_id)
        alerting = self.api.alertingprovisioning
        for rule in group["rules"]:
            uid = rule["uid"]
            current = self._call(f"read alert rule {uid}", alerting.get_alertrule, uid, missing_ok=True)
            if current is None:
                self._call(f"create alert rule {uid}", alerting.create_alertrule, rule)
                self.report.add("alert rule", uid, "created")
            elif _same(current, rule):
                self.report.add("alert rule", uid, "unchanged")
            else:
                self._call(f"update alert rule {uid}", alerting.update_alertrule, uid, rule)
                self.report.add("alert rule", uid, "updated")
        current_group = self._call(
            "read the rule group", alerting.get_rule_group, self.cfg.folder_uid, self.cfg.rule_group, missing_ok=True
        )
        if current_group is not None and current_group.get("interval") == group["interval"]:
            self.report.add("rule group", self.cfg.rule_group, "unchanged")
            return
        self._call(
            "set the rule group's interval", alerting.update_rule_group, self.cfg.folder_uid, self.cfg.rule_group, group
        )
        self.report.add("rule group", self.cfg.rule_group, "updated")

    def contact_points(self) -> bool:
        """Create or update the integrations whose URL is configured; delete sparktap integrations no longer
        configured. Returns whether the chat contact point exists."""
        if self.routing is not None:
            wanted = routing_contact_points(self.routing)
        else:
            urls = {k: v.get_secret_value() for k, v in self.channel_urls.items()}
            wanted = embedded_contact_points(self.cfg, urls)
        alerting = self.api.alertingprovisioning
        existing = self._call("list contact points", alerting.get_contactpoints) or []
        ours = {CONTACT_POINT_CHAT, CONTACT_POINT_WEBHOOK}
        ours |= {str(c.get("name")) for c in existing if str(c.get("name", "")).startswith(ROUTE_PREFIX)}
        existing_uids = {c.get("uid") for c in existing}
        for point in wanted:
            if point["uid"] in existing_uids:
                self._call(f"update contact point {point['uid']}", alerting.update_contactpoint, point["uid"], point)
                self.report.add("contact point", point["uid"], "updated")
            else:
                self._call(f"create contact point {point['uid']}", alerting.create_contactpoint, point)
                self.report.add("contact point", point["uid"], "created")
        wanted_uids = {p["uid"] for p in wanted}
        for point in existing:
            if (
                point.get("name") in ours
                and point.get("uid") not in wanted_uids
                and str(point.get("uid", "")).startswith("sparktap-")
            ):
                self._call(f"delete contact point {point['uid']}", alerting.delete_contactpoint, point["uid"])
                self.report.add("contact point", str(point["uid"]), "deleted")
        if not wanted:
            log.warning(
                "no channel URL configured (SPARKTAP_ALERTS__SLACK_WEBHOOK_URL, …): alert rules deployed, "
                "but no contact point or notification policy"
            )
            self.report.add("contact point", CONTACT_POINT_CHAT, "skipped")
        if self.routing is not None:
            return bool(wanted)
        return any(p["name"] == CONTACT_POINT_CHAT for p in wanted)

    def policy(self, has_chat: bool) -> None:
        if not has_chat:
            self.report.add("notification policy", "sparktap", "skipped")
            return
        alerting = self.api.alertingprovisioning
        tree = self._call("read the notification policy tree", alerting.get_notification_policy_tree) or {}
        subtree = (
            routing_policy(self.routing)
            if self.routing is not None
            else sparktap_route(self.cfg, "webhook" in self.channel_urls)
        )
        merged = merge_route(tree, subtree)
        if merged == tree:
            self.report.add("notification policy", "sparktap", "unchanged")
            return
        self._call("update the notification policy tree", alerting.set_notification_policy_tree, merged)
        self.report.add("notification policy", "sparktap", "updated")


def deploy(
    url: str,
    token: SecretStr,
    cfg: GrafanaConfig,
    endpoint: ClickHouseEndpoint,
    channel_urls: Mapping[str, SecretStr] | None = None,
    timeout: float = 30.0,
    routing: Routing | None = None,
) -> DeployReport:
    """Connect and deploy everything; see ``Deployer``."""
    return Deployer(connect(url, token, timeout), cfg, endpoint, channel_urls, url, routing).deploy()
