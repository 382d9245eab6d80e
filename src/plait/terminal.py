"""Rich consoles and tables that read the same in a terminal and through a pipe.

Rich lays text and tables out at the console's width: 80 columns where no stream is a terminal (``plait estimate |
cat`` under a script, a CI log), which breaks one-line facts over two lines; and it wraps a table's title at the
table's own width, mid-phrase, however wide the screen. Here a console writing to a pipe lays tables out at
:data:`PIPED_WIDTH` columns and never wraps a line of text (a reader's pager or editor does), and a title is one
line above its table. Rich's emoji codes are off (plait writes none; a model or file name such as ``a:b:`` is text),
and where nothing is coloured (a pipe) its highlighting, which only colours numbers and strings, is not run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.table import Table
from rich.text import Text

PIPED_WIDTH = 200
"""Columns a table may take where the output is not a terminal and ``COLUMNS`` does not say (rich's own fallback
is 80, narrower than the plan and validation tables)."""


def rich_console(*, stderr: bool = False) -> Console:
    """A console on stdout (``stderr``: on stderr): rich's own in a terminal or where ``COLUMNS`` is set, else
    :data:`PIPED_WIDTH` columns wide with text lines unwrapped."""
    stream = sys.stderr if stderr else sys.stdout
    isatty = getattr(stream, "isatty", None)
    if (isatty is not None and isatty()) or os.environ.get("COLUMNS", "").isdigit():
        console = Console(stderr=stderr, emoji=False)
    else:
        console = Console(stderr=stderr, width=PIPED_WIDTH, soft_wrap=True, emoji=False)
    if console.color_system is None:  # uncoloured: highlighting would only run its regexes (2% of an estimate's
        # instructions: benchmarks/estimate_process.py --instructions)
        console.highlighter = NullHighlighter()
    return console


def titled_table(title: str, **options: Any) -> Table:
    """A rich table whose ``title`` stays on one line, left-aligned, however narrow the table (``options``: the
    rest of :class:`rich.table.Table`'s arguments)."""
    return Table(title=Text(title, no_wrap=True, overflow="ignore"), title_justify="left", **options)
