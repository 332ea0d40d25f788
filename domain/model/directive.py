"""The agent's directive (standing instructions) as the directive store returns it."""

from __future__ import annotations

import attrs

INJECTION_MODES = ("system_first", "system_append", "user_prepend")
DEFAULT_INJECTION_MODE = "system_first"


@attrs.frozen
class Directive:
    content: str
    injection_mode: str = DEFAULT_INJECTION_MODE
    version_id: str | None = None

    @property
    def is_blank(self) -> bool:
        return not self.content.strip()
