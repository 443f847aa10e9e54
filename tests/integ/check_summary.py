#!/usr/bin/env python3
"""Checks that `ferry demo`'s summary line agrees with its rows: the count of
later versions that finished is the count of their rows, each median is the
median of that column over those same rows, a version that did not finish
is reported n/a (never 0.00 s). Usage: check_summary.py OUTPUT STEPS"""
import re
import statistics
import sys

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size(text):
    num, unit = text.split()
    return float(num) * UNITS[unit]


def fail(why):
    print("check_summary: " + why)
    sys.exit(1)


def main():
    out, steps = open(sys.argv[1]).read(), int(sys.argv[2])
    rows = {}
    for line in out.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) >= 8 and cols[0].isdigit() and re.fullmatch(r"\d+/\d+", cols[7].split()[0]):
            rows[int(cols[0])] = (float(cols[3]), size(cols[2]), float(cols[4]))
    summary = [l for l in out.splitlines() if l.startswith("summary: ") and "writers ->" in l]
    if len(summary) != 1:
        fail("want one summary line, found %d" % len(summary))
    s = summary[0]
    m = re.search(r"version 1 \(connect, plan, sync\) (n/a \(did not finish\)|([\d.]+) s)", s)
    if not m:
        fail("no version 1 figure in: " + s)
    if 1 in rows:
        if not m.group(2) or abs(float(m.group(2)) - rows[1][0]) > 0.0051:
            fail("version 1 finished in %.3f s, the summary says %s" % (rows[1][0], m.group(1)))
    elif m.group(2):
        fail("version 1 has no row but the summary gives it %s s" % m.group(2))
    if steps < 2:
        return
    later = [rows[v] for v in sorted(rows) if v >= 2]
    m = re.search(r"versions 2-(\d+): (\d+) of (\d+) finished", s)
    if not m or int(m.group(1)) != steps or int(m.group(3)) != steps - 1:
        fail("no \"versions 2-%d: K of %d finished\" in: %s" % (steps, steps - 1, s))
    if int(m.group(2)) != len(later):
        fail("%d later versions have rows, the summary says %s finished" % (len(later), m.group(2)))
    if not later:
        if "medians n/a" not in s or "median seconds" in s:
            fail("no later version finished, yet the summary gives medians: " + s)
        return
    m = re.search(r"median seconds ([\d.]+), median bytes moved ([\d.]+ \w+), median GB/s ([\d.]+) \(each over those (\d+)\)", s)
    if not m or int(m.group(4)) != len(later):
        fail("no medians over %d versions in: %s" % (len(later), s))
    odd = len(later) % 2 == 1  # an odd count: each median is one row's value, printed alike
    for i, (name, tol) in enumerate((("seconds", 0.0011), ("bytes moved", 0.006), ("GB/s", 0.011))):
        want = statistics.median(r[i] for r in later)
        got = float(m.group(i + 1)) if i != 1 else size(m.group(2))
        rel = i == 1
        err = abs(got - want) / (want if rel and want else 1)
        if err > (0.006 if rel else (0.0 if odd else tol)) + 1e-9:
            fail("median %s over the rows is %g, the summary says %g" % (name, want, got))


main()
