#!/usr/bin/env bash
# Makes vendor/libsql-ffi again from the crates.io crate and applies Atoll's patch
# (vendor/README.md). Needs the crate in cargo's registry cache: any `cargo fetch` of the
# workspace brings it (temporarily comment out [patch.crates-io] when changing version).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${1:-0.10.0}"
SRC=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"libsql-ffi-$VERSION" | head -1)
[ -d "$SRC" ] || { echo "libsql-ffi $VERSION is not in cargo's registry cache: run cargo fetch" >&2; exit 1; }
rm -rf vendor/libsql-ffi
mkdir -p vendor/libsql-ffi/bundled
cp "$SRC/Cargo.toml" "$SRC/build.rs" vendor/libsql-ffi/
cp -r "$SRC/src" vendor/libsql-ffi/
cp -r "$SRC/bundled/src" "$SRC/bundled/bindings" vendor/libsql-ffi/bundled/
rm -f vendor/libsql-ffi/bundled/src/sqlite3-sqlean-generated.c
patch -d vendor/libsql-ffi -p1 < vendor/libsql-ffi.patch
echo "vendor/libsql-ffi: libsql-ffi $VERSION with vendor/libsql-ffi.patch"
