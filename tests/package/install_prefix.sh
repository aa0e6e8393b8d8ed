#!/usr/bin/env bash
# CTest fixture: a fresh install tree of the build (cmake --install), the
# prefix the package tests build against.
#   install_prefix.sh BUILD_DIR PREFIX
set -euo pipefail
build=$1 prefix=$2
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/lib/cmake/Tessera/TesseraConfig.cmake"
test -f "$prefix/include/tessera/tessera.h"
test -x "$prefix/bin/tessera"
