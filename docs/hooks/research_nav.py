"""The Research section of the nav, from the files present: `research/index.md`, then every
other `research/*.md` sorted by file name and titled by its first `# ` heading, so a new study
page needs no edit of mkdocs.yml. A page without a `# ` heading fails the build."""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority

SECTION = "Research"
HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.M)
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)


def title(path: Path) -> str:
    """The page's first `# ` heading (outside fenced code)."""
    match = HEADING.search(FENCE.sub("", path.read_text(encoding="utf-8")))
    if not match:
        raise PluginError(f"{path}: a research page starts with a '# ' heading (its nav title)")
    return match.group(1)


def research_nav(docs_dir: Path) -> list:
    """research/index.md, then {title: research/<file>.md} per other page, by file name."""
    pages = sorted(p for p in (docs_dir / "research").glob("*.md") if p.name != "index.md")
    return ["research/index.md"] + [{title(p): f"research/{p.name}"} for p in pages]


@event_priority(100)
def on_config(config):
    if config.nav is None:  # no nav in mkdocs.yml: MkDocs lists every page itself
        return config
    for entry in config.nav:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = research_nav(Path(config.docs_dir))
            return config
    raise PluginError(f"mkdocs.yml's nav has no {SECTION!r} section for the research pages")
