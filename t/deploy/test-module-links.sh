#!/bin/bash
# The nginx module links libzmq, msgpack-c and pcre2 and nothing else of ours or of the
# daemons' (never yaml-cpp, CLI11, SQLite or the daemon library): nginx loads it into every
# worker. Checks the DT_NEEDED entries of the built module, and that no daemon code was
# linked in statically (a symbol of grl::daemon or grl::control would show it).
set -euo pipefail
so="$1"
allowed='^(libzmq\.so|libmsgpackc?\.so|libmsgpack-c\.so|libpcre2-8\.so|libstdc\+\+\.so|libm\.so|libgcc_s\.so|libc\.so)'
needed=$(objdump -p "$so" | awk '$1 == "NEEDED" {print $2}')
[ -n "$needed" ] || { echo "no NEEDED entries read from $so"; exit 1; }
bad=$(grep -Ev "$allowed" <<<"$needed" || true)
if [ -n "$bad" ]; then
    echo "$so links libraries it must not: $bad"
    exit 1
fi
if nm -C "$so" | grep -E 'grl::daemon::|grl::control::|YAML::|CLI::' | head -3 | grep -q .; then
    echo "$so contains daemon, control-plane, yaml-cpp or CLI11 code:"
    nm -C "$so" | grep -E 'grl::daemon::|grl::control::|YAML::|CLI::' | head -3
    exit 1
fi
echo "$so links: $(tr '\n' ' ' <<<"$needed")"
