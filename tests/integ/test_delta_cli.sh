#!/usr/bin/env bash
# ferry delta on synthetic checkpoints: a ferry delta applied onto BASE gives
# NEXT byte for byte, NEXT's metadata ("step" 5, not BASE's 4) included; both
# TRL encodings give NEXT's tensors (TRL patches carry no metadata, so
# BASE's stays, as the command says); TRL patches written by ferry read
# correctly per the format's description (an independent stdlib-Python
# reader) and patches written by that script apply in ferry; wrong bases,
# damaged deltas and bad input are refused and write nothing, not even a
# temporary file.
set -u
ferry=$(realpath "$1")
here=$(realpath "$2")
source "$here/expect.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
py=/usr/bin/python3

# check NAME CONDITION: counts a pass when the shell condition holds
check() {
    if eval "$2"; then pass=$((pass + 1)); else echo "FAIL: $1"; fail=$((fail + 1)); fi
}
# meta FILE KEY: a safetensors file's metadata value
meta() {
    $py -c 'import json,struct,sys
b=open(sys.argv[1],"rb").read(); n=struct.unpack_from("<Q",b)[0]
print(json.loads(b[8:8+n]).get("__metadata__",{}).get(sys.argv[2],""))' "$1" "$2"
}
# same_tensors A B: the same tensors (names, dtypes, shapes, bytes) in the same order
same_tensors() {
    $py -c 'import json,struct,sys
def t(p):
    b=open(p,"rb").read(); n=struct.unpack_from("<Q",b)[0]; h=json.loads(b[8:8+n]); h.pop("__metadata__",None)
    return [(k,v["dtype"],v["shape"],b[8+n+v["data_offsets"][0]:8+n+v["data_offsets"][1]]) for k,v in h.items()]
sys.exit(t(sys.argv[1])!=t(sys.argv[2]))' "$1" "$2"
}
# no_output: no OUT and no temporary file beside it
no_output() { ! ls bad.st* >/dev/null 2>&1; }

expect 0 "Adam steps 4 and 5" -- delta synth base.st next.st --elems 65536 --tensors 2
check "synth's metadata" '[ "$(meta base.st step)" = 4 ] && [ "$(meta next.st step)" = 5 ]'
expect 0 "B per changed element" -- delta encode base.st next.st -o d.ferry --base-version 4 --next-version 5
expect 0 "trl-raw delta" -- delta encode base.st next.st -o d.raw --format trl-raw
expect 0 "trl-gap delta" -- delta encode base.st next.st -o d.gap --format trl-gap
expect 0 "every chunk and whole tensor verified against its xxh3; NEXT's metadata" -- \
    delta apply base.st d.ferry -o out.ferry --base-version 4
check "out.ferry is next.st byte for byte" 'cmp -s out.ferry next.st'
check "out.ferry says step 5" '[ "$(meta out.ferry step)" = 5 ] && [ "$(meta out.ferry format)" = pt ]'
expect 0 "not verified: TRL patches carry no checksum; BASE's metadata kept" -- delta apply base.st d.raw -o out.raw
expect 0 "not verified" -- delta apply base.st d.gap -o out.gap
for f in out.raw out.gap; do
    check "$f has next.st's tensors" "same_tensors $f next.st"
    check "$f keeps base.st's metadata" '[ "$(meta '$f' step)" = 4 ]'
done
# a delta that carries no metadata of NEXT (as older ferry wrote them): BASE's stays, said so
$py -c 'import json,struct,sys
b=open("d.ferry","rb").read(); n=struct.unpack_from("<Q",b)[0]; h=json.loads(b[8:8+n])
del h["__metadata__"]["next_metadata"]; t=json.dumps(h,separators=(",",":")).encode(); t+=b" "*(-len(t)%8)
open("old.ferry","wb").write(struct.pack("<Q",len(t))+t+b[8+n:])'
expect 0 "BASE's metadata kept (the patch carries none of NEXT's)" -- delta apply base.st old.ferry -o out.old
check "out.old has next.st's tensors" 'same_tensors out.old next.st'
# next_metadata that is not a map of strings: refused before anything is written
$py -c 'import json,struct,sys
b=open("d.ferry","rb").read(); n=struct.unpack_from("<Q",b)[0]; h=json.loads(b[8:8+n])
h["__metadata__"]["next_metadata"]="{\"step\": 5}"; t=json.dumps(h,separators=(",",":")).encode(); t+=b" "*(-len(t)%8)
open("badmeta.ferry","wb").write(struct.pack("<Q",len(t))+t+b[8+n:])'
expect 1 "\"next_metadata\" of the delta is not a JSON map of strings" -- delta apply base.st badmeta.ferry -o bad.st
check "a refused metadata wrote nothing" no_output
expect 0 "ferry delta, version 4 -> 5" -- delta inspect d.ferry
expect 0 "TRL sparse patch, model_version 1, encoding gap_delta" -- delta inspect d.gap
expect 0 "safetensors checkpoint, 3 tensors" -- delta inspect base.st

# interop with an independent reader/writer of TRL's format
for f in d.raw d.gap; do
    if $py "$here/trl_interop.py" check base.st next.st "$f"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
if $py "$here/trl_interop.py" write base.st next.st py.gap; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
expect 0 "TRL patch applied" -- delta apply base.st py.gap -o out.py
check "the python patch gives next.st's tensors" 'same_tensors out.py next.st'

# refusals: nothing is written, not even a temporary file
expect 1 "not this delta's base" -- delta apply next.st d.ferry -o bad.st
check "a wrong base wrote nothing" no_output
expect 1 "from version 4, not 3" -- delta apply base.st d.ferry -o bad.st --base-version 3
check "a wrong version wrote nothing" no_output
cp d.ferry broken.ferry
size=$(stat -c %s broken.ferry)
printf '\x55' | dd of=broken.ferry bs=1 seek=$((size - 100)) conv=notrunc status=none
expect 1 "damaged" -- delta apply base.st broken.ferry -o bad.st
check "a damaged delta wrote nothing" no_output
head -c $((size / 2)) d.ferry >cut.ferry
expect 1 "cut.ferry" -- delta apply base.st cut.ferry -o bad.st
expect 1 "neither a ferry delta nor a TRL patch" -- delta apply base.st next.st -o bad.st
check "no refusal wrote anything" no_output
# a TRL patch with an index past its tensor: refused, nothing written
$py -c 'import json,struct,sys
b=bytearray(open("d.raw","rb").read()); n=struct.unpack_from("<Q",b)[0]; h=json.loads(b[8:8+n])
k=[k for k in h if k.endswith(".idx")][0]; o=8+n+h[k]["data_offsets"][0]
struct.pack_into("<i",b,o,1<<30); open("badidx.raw","wb").write(b)'
expect 1 "index 0 is out of range or out of order" -- delta apply base.st badidx.raw -o bad.st
check "a bad TRL index wrote nothing" no_output
# an existing OUT is replaced only by a finished file
cp base.st keep.st
expect 1 "not this delta's base" -- delta apply next.st d.ferry -o keep.st
check "a refused apply left OUT as it was" 'cmp -s keep.st base.st && ! ls keep.st.tmp.* >/dev/null 2>&1'
expect 0 "NEXT's metadata" -- delta apply base.st d.ferry -o keep.st --base-version 4
check "a finished apply replaced OUT" 'cmp -s keep.st next.st'

expect 1 "cannot open" -- delta apply base.st missing.st -o bad.st
expect 2 "needs BASE, NEXT and -o OUT" -- delta encode base.st
expect 2 "--format zip: ferry, trl-raw or trl-gap" -- delta encode base.st next.st -o x --format zip
expect 2 "unknown subcommand" -- delta squash
expect_done
