"""The Research section of the nav, from the research index (`research/index.md`), the one place
that orders the studies: the index first, then one group per `## ` section of the index that links
study pages, named by that section's heading and holding its pages in the index's order, each
titled by its first `# ` heading. So the sidebar and the index cannot disagree, and a new study
page needs a line in the index but no edit of mkdocs.yml. A study page the index does not link, a
link to a page that is not there, or a page without a `# ` heading fails the build."""
from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from results import FENCE  # the fenced-code pattern the results markers skip too

SECTION = "Research"
HEADING = re.compile(r"^#\s+(.+?)\s*#*\s*$", re.M)
GROUP = re.compile(r"^##\s+(.+?)\s*#*\s*$", re.M)
PAGE_LINK = re.compile(r"\]\(([\w-]+\.md)(?:#[\w-]*)?\)")  # a link to a page beside the index


def plain(text: str) -> str:
    return text.replace("`", "")  # nav titles are plain text


def title(path: Path) -> str:
    """The page's first `# ` heading (outside fenced code)."""
    match = HEADING.search(FENCE.sub("", path.read_text(encoding="utf-8")))
    if not match:
        raise PluginError(f"{path}: a research page starts with a '# ' heading (its nav title)")
    return plain(match.group(1))


def index_sections(index: str) -> list[tuple[str, list[str]]]:
    """(heading, page file names) per `## ` section of the index that links pages, in the index's
    order; a page linked again later stays where it was first linked."""
    parts = GROUP.split(FENCE.sub("", index))  # [text before the first section, heading, body, ...]
    seen: set[str] = set()
    sections = []
    for heading, body in zip(parts[1::2], parts[2::2]):
        pages = [p for p in dict.fromkeys(PAGE_LINK.findall(body)) if p not in seen and p != "index.md"]
        seen.update(pages)
        if pages:
            sections.append((plain(heading), pages))
    return sections


def research_nav(docs_dir: Path) -> list:
    """research/index.md, then {section: [{title: research/<file>.md}, ...]} per index section."""
    research = docs_dir / "research"
    sections = index_sections((research / "index.md").read_text(encoding="utf-8"))
    linked = {p for _, pages in sections for p in pages}
    present = {p.name for p in research.glob("*.md")} - {"index.md"}
    if present - linked:
        raise PluginError(f"research pages that research/index.md does not link (add each under its "
                          f"section there): {sorted(present - linked)}")
    if linked - present:
        raise PluginError(f"research/index.md links pages that are not there: {sorted(linked - present)}")
    return ["research/index.md"] + [{heading: [{title(research / p): f"research/{p}"} for p in pages]}
                                    for heading, pages in sections]


@event_priority(100)
def on_config(config):
    if config.nav is None:  # no nav in mkdocs.yml: MkDocs lists every page itself
        return config
    for entry in config.nav:
        if isinstance(entry, dict) and SECTION in entry:
            entry[SECTION] = research_nav(Path(config.docs_dir))
            return config
    raise PluginError(f"mkdocs.yml's nav has no {SECTION!r} section for the research pages")
