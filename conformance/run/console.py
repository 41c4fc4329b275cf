"""The run's progress lines on stderr, also while a check runs (pytest captures output then)."""

from __future__ import annotations

import contextlib
import sys

import pytest


class Console:
    """Where the run's parts write progress: stderr, past pytest's capture once the run knows its config."""

    def __init__(self) -> None:
        self.config: pytest.Config | None = None

    def say(self, text: str) -> None:
        capman = self.config.pluginmanager.getplugin("capturemanager") if self.config else None
        with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
            sys.stderr.write(text)
            sys.stderr.flush()
