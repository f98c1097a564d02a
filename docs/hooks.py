"""mkdocs hooks: ``<!-- queuegate-help ARGS -->`` in a page becomes the
console's own ``queuegate ARGS --help``, so the CLI reference is what the
installed console says; ``<!-- queuegate-include FILE -->`` makes the page a
file from the top of the repository (SECURITY.md, which GitHub shows where
people look for it), its links to ``docs/...`` made the site's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- queuegate-help ?([\w -]*?) -->")
INCLUDE = re.compile(r"<!-- queuegate-include ([\w.-]+) -->\n")
ROOT = Path(__file__).resolve().parent.parent


def _help(args: str) -> str:
    command = [sys.executable, "-m", "queuegate", *args.split(), "--help"]
    env = {**os.environ, "COLUMNS": "88", "NO_COLOR": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=60)
    return f"```text\n$ queuegate {args + ' ' if args else ''}--help\n{done.stdout.rstrip()}\n```"


def _include(name: str) -> str:
    """A top-level file's text, its links written from the top of the
    repository (``docs/guides/x.md``) made relative to the site's root page
    (``guides/x.md``); the including page must sit at the site's root."""
    return re.sub(r"\]\(docs/", "](", (ROOT / name).read_text())


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    markdown = INCLUDE.sub(lambda found: _include(found.group(1)), markdown)
    return MARKER.sub(lambda found: _help(found.group(1).strip()), markdown)
