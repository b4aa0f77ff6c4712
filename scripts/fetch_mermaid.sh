#!/usr/bin/env bash
# The documentation site's own copy of mermaid, which draws the diagrams on Home and Pipeline.
# Material loads mermaid from a CDN unless the page already has it; the site names this copy in
# mkdocs.yml (extra_javascript), so that it reads offline. Without it, offline, the diagrams show
# their source and the failed load stops the search from starting.
#
# Fetched from the npm registry with npm (`npm pack`, which checks the registry's integrity hash),
# pinned by version and by the sha256 of the file the site serves, and written with its MIT
# licence into docs/assets/vendor/mermaid/ (git-ignored). Idempotent: nothing is fetched while
# the file there has the pinned hash. scripts/setup.sh runs it; a docs build without the file
# fails (docs/hooks/local_assets.py).
set -euo pipefail

# Mermaid 11: the major release that Material 9's mermaid integration is written for.
VERSION=11.17.2
SHA256=581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8  # package/dist/mermaid.min.js

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
DEST="$ROOT/docs/assets/vendor/mermaid"
log() { echo "[mermaid] $*" >&2; }

pinned() { [ -f "$1/LICENSE" ] && echo "$SHA256  $1/mermaid.min.js" | sha256sum --check --status; }

pinned "$DEST" && exit 0
command -v npm >/dev/null 2>&1 || { log "npm not found: install Node.js and npm (Debian: npm)"; exit 1; }

log "fetching mermaid $VERSION from the npm registry"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && NPM_CONFIG_UPDATE_NOTIFIER=false npm pack --silent "mermaid@$VERSION" >/dev/null)
mkdir "$tmp/out"
tar -xzf "$tmp/mermaid-$VERSION.tgz" -C "$tmp/out" --transform='s,.*/,,' package/dist/mermaid.min.js package/LICENSE
pinned "$tmp/out" || { log "mermaid $VERSION's dist/mermaid.min.js does not have the pinned sha256 $SHA256"; exit 1; }
mkdir -p "$DEST"
cp "$tmp/out/LICENSE" "$DEST/LICENSE"
cp "$tmp/out/mermaid.min.js" "$DEST/mermaid.min.js.tmp"
mv "$DEST/mermaid.min.js.tmp" "$DEST/mermaid.min.js"  # a reader sees the old file or the new one
log "mermaid $VERSION in $DEST"
