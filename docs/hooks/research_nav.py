"""The Research section of the nav, from the files present: `research/index.md`, then every
other `research/<area>-<topic>.md` grouped by area (AREAS) and sorted by file name, titled by
its first `# ` heading, so a new study page needs no edit of mkdocs.yml. A page without a `# `
heading, or of an unknown area, fails the build."""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from results import FENCE  # the fenced-code pattern the results markers skip too

SECTION = "Research"
HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.M)
# file-name prefix -> nav group, in nav order
AREAS = {"eval": "Evaluation", "recipe": "Training recipe", "data": "Training data", "speed": "Speed"}


def title(path: Path) -> str:
    """The page's first `# ` heading (outside fenced code)."""
    match = HEADING.search(FENCE.sub("", path.read_text(encoding="utf-8")))
    if not match:
        raise PluginError(f"{path}: a research page starts with a '# ' heading (its nav title)")
    return match.group(1).replace("`", "")  # nav titles are plain text


def research_nav(docs_dir: Path) -> list:
    """research/index.md, then {area: [{title: research/<file>.md}, ...]} per area."""
    pages = sorted(p for p in (docs_dir / "research").glob("*.md") if p.name != "index.md")
    unknown = [p.name for p in pages if p.name.split("-")[0] not in AREAS]
    if unknown:
        raise PluginError(f"research pages of no known area {sorted(AREAS)}: {unknown}")
    groups = [{name: [{title(p): f"research/{p.name}"} for p in pages if p.name.split("-")[0] == area]}
              for area, name in AREAS.items()]
    return ["research/index.md"] + [g for g in groups if next(iter(g.values()))]


@event_priority(100)
def on_config(config):
    if config.nav is None:  # no nav in mkdocs.yml: MkDocs lists every page itself
        return config
    for entry in config.nav:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = research_nav(Path(config.docs_dir))
            return config
    raise PluginError(f"mkdocs.yml's nav has no {SECTION!r} section for the research pages")
