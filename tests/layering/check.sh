#!/usr/bin/env bash
# The build's layering, checked from the outside: a module's include tree
# (build/modules/<m>/) must refuse the headers of modules above it or beside
# it, and its link check must refuse calls into them, while what it may use
# compiles and links. Usage: check.sh CC BUILD_DIR
set -u
cc=$1 build=$2
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0

# compile MODULE PROBE EXPECT(ok|refused) HEADER
compile() {
    local m=$1 probe=$2 expect=$3 header=$4 out
    out=$("$cc" -fsyntax-only -I"$build/modules/$m/src" -I"$build/modules/$m/include" \
        "$here/$probe" 2>&1)
    local rc=$?
    if [ "$expect" = ok ] && [ $rc -eq 0 ]; then
        echo "ok: $m may include what $probe includes"
    elif [ "$expect" = refused ] && [ $rc -ne 0 ] && grep -q "$header" <<<"$out" &&
         grep -Eq "No such file|not found" <<<"$out"; then
        echo "ok: $m cannot include $header"
    else
        echo "FAIL: $m with $probe: expected $expect, compiler said (rc $rc):"
        echo "$out" | head -5
        fails=$((fails + 1))
    fi
}

# link MODULE PROBE EXPECT(ok|refused) SYMBOL
link() {
    local m=$1 probe=$2 expect=$3 sym=$4 out
    out=$("$cc" -shared -fPIC -Wl,--no-undefined "$here/$probe" -L"$build/layering" \
        -lferry_layering_"$m" -o "$tmp/probe.so" 2>&1)
    local rc=$?
    if [ "$expect" = ok ] && [ $rc -eq 0 ]; then
        echo "ok: $m's objects define $sym"
    elif [ "$expect" = refused ] && [ $rc -ne 0 ] && grep -q "undefined reference to .$sym" <<<"$out"; then
        echo "ok: a call from $m to $sym does not link"
    else
        echo "FAIL: linking $probe against $m: expected $expect (rc $rc):"
        echo "$out" | head -5
        fails=$((fails + 1))
    fi
}

compile plan plan_allowed.c ok ""
compile plan plan_includes_sync.c refused sync/sync_internal.h
compile codec codec_includes_sync_api.c refused ferry/sync.h
compile meta meta_includes_layout.c refused layout/layout_internal.h
compile sync sync_includes_channel.c ok ""
compile sync sync_includes_protobuf.c refused meta/meta.pb-c.h
link plan call_plan.c ok ferry_plan_destroy
link plan call_writer.c refused ferry_writer_destroy
link codec call_xport.c refused ferry_xport_destroy
[ $fails -eq 0 ] || { echo "$fails layering check(s) failed"; exit 1; }
