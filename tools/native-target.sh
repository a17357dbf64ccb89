#!/bin/sh
# tools/native-target.sh COMMAND [ARG...]: run COMMAND (an install or a wheel build that compiles
# native/ with cargo, through setuptools-rust) with CARGO_TARGET_DIR set to the cargo target
# directory the user's cache keeps for exactly these sources: $AGENT_WATCHDOG_CACHE/cargo-target/
# src-HASH, HASH that of every file under native/.
#
# Cargo decides that a crate of the workspace is up to date by comparing its sources' mtimes with
# its last build's; in a new clone every file is new, so the crates were compiled again each time
# (100 CPU seconds). A directory built from these very sources (its .built stamp) can be trusted,
# so the sources are dated back before running COMMAND and cargo finds nothing to do. A directory
# for new sources starts as a copy of the last one used (the dependencies stay compiled; cargo
# compiles the workspace's crates, their sources touched first). One build at a time (a lock), the
# three directories used last are kept.
#
# PyO3's build configuration is rerun, and everything above it compiled again, whenever the
# interpreter it is given changes: setuptools-rust gives it the base interpreter (its real path)
# rather than the build's isolated environment, a new temporary directory every time.
set -eu
export SETUPTOOLS_RUST_PEP517_USE_BASE_PYTHON=1
root=$(cd "$(dirname "$0")/.." && pwd)
targets=${AGENT_WATCHDOG_CACHE:?set by the Makefile}/cargo-target
mkdir -p "$targets"
sources=$(cd "$root" && find native -type f -not -path '*/target/*' | LC_ALL=C sort)
key=$(cd "$root" && { echo "$sources"; echo "$sources" | tr '\n' '\0' | xargs -0 cat; } \
      | sha256sum | cut -c1-16)
dir=$targets/src-$key

exec 9>"$targets/.lock"
flock 9
if [ -f "$dir/.built" ]; then
    (cd "$root" && echo "$sources" | tr '\n' '\0' | xargs -0 touch -h -d @1000000000)
else
    rm -rf "$dir" "$dir.partial"
    last=$(ls -t "$targets"/src-*/.built 2>/dev/null | head -n 1 || true)
    if [ -n "$last" ]; then
        cp -a "$(dirname "$last")" "$dir.partial" && rm -f "$dir.partial/.built"
    elif [ -d "$targets/release" ]; then  # the one directory of before
        mkdir -p "$dir.partial" && cp -a "$targets/release" "$dir.partial/"
    fi
    mkdir -p "$dir.partial"
    mv "$dir.partial" "$dir"
    # the copy may hold a build newer than these sources' mtimes (another clone's or worktree's
    # sources, built since they were written): cargo would take it as up to date
    (cd "$root" && echo "$sources" | tr '\n' '\0' | xargs -0 touch -h)
fi
CARGO_TARGET_DIR=$dir "$@"
touch "$dir/.built"
ls -t "$targets"/src-*/.built | tail -n +4 | while read -r old; do rm -rf "$(dirname "$old")"; done
