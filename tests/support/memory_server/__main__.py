"""``python -m tests.support.memory_server``: see process.py."""

from __future__ import annotations

from tests.support.memory_server.process import main

main()
