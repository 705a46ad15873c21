#!/usr/bin/env bash
# Configures an nginx source/header tree into BUILDDIR without writing into the
# tree: configure-nginx.sh NGINX_SRC_DIR BUILDDIR [configure args...]
# With no args: the tree's conf_flags (Debian's nginx-dev ships them), else
# --with-compat alone.
set -euo pipefail
src=$1 builddir=$2
shift 2
cd "$src"
if [ $# -eq 0 ]; then
  if [ -f conf_flags ]; then
    # shellcheck disable=SC1091
    . ./conf_flags
    set -- "${NGX_CONF_FLAGS[@]}"
  else
    set -- --with-compat
  fi
fi
if [ -x ./configure ]; then cfg=./configure; else cfg=./auto/configure; fi
exec "$cfg" "$@" --builddir="$builddir"
