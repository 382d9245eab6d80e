"""plait's rich console: text is printed as given (no emoji codes), and highlighting colours what a coloured
console shows while an uncoloured one (a pipe) skips it without changing a character."""

from __future__ import annotations

import re

import pytest

from plait.terminal import rich_console

LINE = "Llama 3 8B:cd: on 8 x GPUs, 12.8 s (a:b:)"


@pytest.mark.parametrize("force_color", [None, "1"])
def test_console_prints_text_as_given(
    force_color: str | None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "COLUMNS", "COLORTERM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")  # TERM=dumb (some CI shells) turns colour off even when forced
    if force_color:
        monkeypatch.setenv("FORCE_COLOR", force_color)
    rich_console().print(LINE)
    out = capsys.readouterr().out
    plain = re.sub("\x1b\\[[0-9;]*m", "", out)  # the text without its colours
    assert plain == LINE + "\n"  # ":cd:" and ":b:" are rich emoji codes (a CD, a B button): kept as text
    assert (out != plain) == bool(force_color)  # rich's highlighting (numbers, brackets), where it colours
