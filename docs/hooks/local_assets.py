"""Every script and stylesheet that the pages load through mkdocs.yml's extra_javascript,
extra_css and extra.polyfills (the offline plugin's search shim) is a file of the built site, so
the site reads offline: one on another host, or one missing from the site, fails the build. Mermaid is fetched at set-up (scripts/fetch_mermaid.sh)
and not committed, so a checkout that has not run scripts/setup.sh is stopped here rather than
building pages whose diagrams Material would load from a CDN (mkdocs does not check these paths)."""
from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from mkdocs.exceptions import PluginError


def missing_assets(config) -> list[str]:
    """What the pages would load that the built site does not hold, each with the reason."""
    problems = []
    polyfills = (getattr(config, "extra", None) or {}).get("polyfills", [])
    for asset in [*map(str, config.extra_javascript), *config.extra_css, *map(str, polyfills)]:
        if urlsplit(asset).scheme or asset.startswith("//"):
            problems.append(f"{asset}: on another host (the site reads offline)")
        elif not (Path(config.site_dir) / asset).is_file():
            problems.append(f"{asset}: not in the site (nor in {config.docs_dir})")
    return problems


def on_post_build(config):
    problems = missing_assets(config)
    if problems:
        raise PluginError("the pages load assets that the site does not hold; `bash scripts/setup.sh` "
                          "fetches mermaid (scripts/fetch_mermaid.sh):\n  " + "\n  ".join(problems))
