#!/usr/bin/env bash
# Vendor the console's browser terminal (xterm.js and its fit addon) from npm into
# src/gpudock/web/static/vendor/, with their licences. The result is committed: the
# package serves these files itself and needs neither npm nor a CDN at runtime.
# Re-run after changing a version below, then commit what changed.
#   scripts/vendor_js.sh
set -euo pipefail
cd "$(dirname "$0")/.."

XTERM_VERSION=6.0.0
FIT_VERSION=0.11.0
target=src/gpudock/web/static/vendor/xterm

command -v npm >/dev/null || { echo "vendor_js.sh needs npm (apt-get install npm)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# `npm pack` checks each tarball against the registry's integrity hash.
(cd "$work" && npm pack --silent "@xterm/xterm@$XTERM_VERSION" "@xterm/addon-fit@$FIT_VERSION" >/dev/null)
for tarball in "$work"/*.tgz; do
    mkdir -p "${tarball%.tgz}"
    tar -xzf "$tarball" -C "${tarball%.tgz}"
done
xterm="$work/xterm-xterm-$XTERM_VERSION/package"
fit="$work/xterm-addon-fit-$FIT_VERSION/package"

rm -rf "$target"
mkdir -p "$target"
# The source maps are not shipped, so their reference goes too (no 404 in devtools).
strip_map() { sed '/^\/\/# sourceMappingURL=/d' "$1" > "$2"; }
strip_map "$xterm/lib/xterm.js" "$target/xterm.min.js"
strip_map "$fit/lib/addon-fit.js" "$target/addon-fit.min.js"
cp "$xterm/css/xterm.css" "$target/xterm.css"
cp "$xterm/LICENSE" "$target/LICENSE.xterm"
cp "$fit/LICENSE" "$target/LICENSE.addon-fit"
{
    echo "@xterm/xterm $XTERM_VERSION (MIT, LICENSE.xterm)"
    echo "@xterm/addon-fit $FIT_VERSION (MIT, LICENSE.addon-fit)"
    echo "made by scripts/vendor_js.sh; sha256 of each file:"
    (cd "$target" && sha256sum xterm.min.js addon-fit.min.js xterm.css)
} > "$target/VERSIONS"
echo "==> vendored into $target:"
ls -l "$target"
