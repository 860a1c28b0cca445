"""A routing file shared by the routing tests (``tests/unit/test_routing*.py``): four routes, one with
``continue``, team / user / rule / app-name-glob matches, mentions, env and file secrets, a default."""

ROUTES = """
channels:
  pager: {type: webhook, url_env: T_PAGER}
  oncall: {type: slack, url_env: T_ONCALL}
  data: {type: teams, url_file: /run/secrets/data}
  alice-hook: {type: webhook, url_env: T_ALICE}
handles: {alice: "<@U0ALICE>", carol: "<@U0CAROL>"}
routes:
  - name: prod-critical
    match: {cluster: prod-eu, severity: critical}
    channels: [pager, oncall]
    renotify: 1h
    continue: true
  - name: nightly
    match: {app_name: ["nightly-*", "batch-?"]}
    channels: [data, oncall]
    renotify: 4h
  - name: team-x
    match: {team: team-x}
    channels: [data]
    mention: user
  - name: alice
    match: {user: alice, rule: [data_skew, gc_pressure]}
    channels: [alice-hook]
    mention: [carol]
default: {channels: [pager], renotify: 2h}
"""
