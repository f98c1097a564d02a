"""mkdocs hook: ``<!-- queuegate-help ARGS -->`` in a page becomes the console's
own ``queuegate ARGS --help``, so the CLI reference is what the installed
console says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

MARKER = re.compile(r"<!-- queuegate-help ?([\w -]*?) -->")


def _help(args: str) -> str:
    command = [sys.executable, "-m", "queuegate", *args.split(), "--help"]
    env = {**os.environ, "COLUMNS": "88", "NO_COLOR": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=60)
    return f"```text\n$ queuegate {args + ' ' if args else ''}--help\n{done.stdout.rstrip()}\n```"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    return MARKER.sub(lambda found: _help(found.group(1).strip()), markdown)
