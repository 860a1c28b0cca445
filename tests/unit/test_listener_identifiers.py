"""The listener's identifier rule (Identifiers.java) is the contract's (schemas/types.py), verbatim."""

from __future__ import annotations

import re
from pathlib import Path

from sparktap.listener import javabuild
from sparktap.schemas.types import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN

JAVA = Path(javabuild.JAVA_SOURCES) / "io" / "sparktap" / "listener" / "Identifiers.java"


def test_java_identifier_pattern_is_the_contracts() -> None:
    source = JAVA.read_text(encoding="utf-8")
    (java_pattern,) = re.findall(r'static final String IDENTIFIER_PATTERN = "([^"]*)";', source)
    assert java_pattern == IDENTIFIER_PATTERN
    assert f"static final int MAX_LENGTH = {IDENTIFIER_MAX_LENGTH};" in source
