"""``python -m sparktap.store``: print the users.d file of the read-only users configured in the settings
(``SPARKTAP_CLICKHOUSE__READONLY_USER``, ``__TEAMS``), for servers without SQL user management (18.16)."""

from __future__ import annotations

from sparktap.store.access import users_xml
from sparktap.store.settings import load_store_settings


def main() -> None:
    ch = load_store_settings().clickhouse
    print(users_xml(ch.target().database, ch.readers()))  # noqa: T201 - the command's output


if __name__ == "__main__":
    main()
