#!/usr/bin/env bash
# The compiler of the workspace's own crates in make test and make lint: cargo runs it as
# RUSTC_WORKSPACE_WRAPPER (`lint-rustc.sh <rustc> <rustc's arguments…>`; dependencies get rustc
# itself). It runs clippy on the crate, as clippy-driver (what `cargo clippy` runs, with
# CLIPPY_ARGS, `-Dwarnings` in both targets), and then, for what `cargo doc --workspace`
# documents — every library, and every binary not named as its package (a function's
# `main.rs`, a benchmark's) — rustdoc on the same crate with the same dependencies: warnings as
# errors, so every intra-doc link resolves, private items documented too (links to them are
# the workspace's own).
#
# Why not `cargo doc`: it reads the dependencies' metadata from a check of them of its own,
# which the build's artifacts do not serve. From a fresh clone, that check of every dependency
# was 194 of the 284 CPU-seconds `cargo doc` took (and the examples' clippy another 53, on the
# same check); here rustdoc reads the metadata the build has just written, and only the
# workspace's crates are documented (~90 CPU-seconds). Each unit's pages go to a folder of its
# own (`<target>/<profile>/rustdoc/<crate><hash>`): units documented side by side share no file.
set -euo pipefail
clippy-driver "$@"
rustc=$1
shift
# rustdoc takes rustc's arguments that say what the crate is and where its dependencies are;
# what only a compiler needs (what to emit, where, codegen options, the diagnostics' format
# cargo reads back) stays out.
args=() kind= out= unit= source=
while [ $# -gt 0 ]; do
  case $1 in
    --test | --print | --print=*) exit 0 ;;
    --crate-type) kind=$2 && args+=("$1" "$2") && shift ;;
    --out-dir) out=$2 && shift ;;
    -C) [[ $2 == extra-filename=* ]] && unit=${2#extra-filename=}; shift ;;
    --emit=* | --error-format=* | --json=* | --diagnostic-width=* | -C*) ;;
    --crate-name | --edition | --cfg | --check-cfg | -L | --extern | --cap-lints | -W | -A | -D \
      | -F) args+=("$1" "$2") && shift ;;
    *.rs) source=$1 && args+=("$1") ;;
    *) args+=("$1") ;;
  esac
  shift
done
case $kind in
  lib | rlib) ;;
  # Not an example, nor a binary named as its package (whose library cargo doc documents in its
  # place).
  bin) [[ $source != */examples/* && $CARGO_CRATE_NAME != "${CARGO_PKG_NAME//-/_}" ]] || exit 0 ;;
  *) exit 0 ;;
esac
[ -n "$out" ] || exit 0
rustdoc=$(dirname "$rustc")/rustdoc
[ -x "$rustdoc" ] || rustdoc=rustdoc
exec "$rustdoc" "${args[@]}" --document-private-items -D warnings \
  -A rustdoc::private_intra_doc_links -o "$(dirname "$out")/rustdoc/$CARGO_CRATE_NAME$unit"
