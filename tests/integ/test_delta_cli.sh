#!/usr/bin/env bash
# ferry delta on synthetic checkpoints: encode/apply round trips in ferry's
# format and both TRL encodings give NEXT byte for byte; TRL patches written
# by ferry read correctly per the format's description (an independent
# stdlib-Python reader) and patches written by that script apply in ferry;
# wrong bases, damaged deltas and bad input are refused and write nothing.
set -u
ferry=$(realpath "$1")
here=$(realpath "$2")
source "$here/expect.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
py=/usr/bin/python3

expect 0 "Adam steps 4 and 5" -- delta synth base.st next.st --elems 65536 --tensors 2
expect 0 "B per changed element" -- delta encode base.st next.st -o d.ferry --base-version 4 --next-version 5
expect 0 "trl-raw delta" -- delta encode base.st next.st -o d.raw --format trl-raw
expect 0 "trl-gap delta" -- delta encode base.st next.st -o d.gap --format trl-gap
expect 0 "every chunk and whole tensor verified" -- delta apply base.st d.ferry -o out.ferry --base-version 4
expect 0 "not verified" -- delta apply base.st d.raw -o out.raw
expect 0 "not verified" -- delta apply base.st d.gap -o out.gap
for f in out.ferry out.raw out.gap; do
    if cmp -s "$f" next.st; then pass=$((pass + 1)); else echo "FAIL: $f differs from next.st"; fail=$((fail + 1)); fi
done
expect 0 "ferry delta, version 4 -> 5" -- delta inspect d.ferry
expect 0 "TRL sparse patch, model_version 1, encoding gap_delta" -- delta inspect d.gap
expect 0 "safetensors checkpoint, 3 tensors" -- delta inspect base.st

# interop with an independent reader/writer of TRL's format
for f in d.raw d.gap; do
    if $py "$here/trl_interop.py" check base.st next.st "$f"; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
done
if $py "$here/trl_interop.py" write base.st next.st py.gap; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
expect 0 "TRL patch applied" -- delta apply base.st py.gap -o out.py
if cmp -s out.py next.st; then pass=$((pass + 1)); else echo "FAIL: python patch result differs"; fail=$((fail + 1)); fi

# refusals: nothing is written
expect 1 "not this delta's base" -- delta apply next.st d.ferry -o bad.st
expect 1 "from version 4, not 3" -- delta apply base.st d.ferry -o bad.st --base-version 3
cp d.ferry broken.ferry
size=$(stat -c %s broken.ferry)
printf '\x55' | dd of=broken.ferry bs=1 seek=$((size - 100)) conv=notrunc status=none
expect 1 "damaged" -- delta apply base.st broken.ferry -o bad.st
head -c $((size / 2)) d.ferry >cut.ferry
expect 1 "cut.ferry" -- delta apply base.st cut.ferry -o bad.st
expect 1 "neither a ferry delta nor a TRL patch" -- delta apply base.st next.st -o bad.st
if [ -e bad.st ]; then echo "FAIL: a refused apply wrote bad.st"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
expect 1 "cannot open" -- delta apply base.st missing.st -o bad.st
expect 2 "needs BASE, NEXT and -o OUT" -- delta encode base.st
expect 2 "--format zip: ferry, trl-raw or trl-gap" -- delta encode base.st next.st -o x --format zip
expect 2 "unknown subcommand" -- delta squash
expect_done
