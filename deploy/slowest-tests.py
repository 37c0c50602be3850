#!/usr/bin/env python3
"""Prints the N slowest tests of cargo-nextest's JUnit reports, slowest first.

    slowest-tests.py N REPORT.xml...

Each line: seconds, the run the report came from (its file name after
"junit-"), the test binary and the test; a failed test is marked. Reports
that are missing or unreadable are named and skipped: the list is a summary,
the step's own output is the verdict.
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main() -> int:
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        print(__doc__.strip(), file=sys.stderr)
        return 2
    n = int(sys.argv[1])
    rows = []
    for report in sys.argv[2:]:
        path = Path(report)
        run = path.stem.removeprefix("junit-")
        try:
            root = ET.parse(path).getroot()
        except (OSError, ET.ParseError) as e:
            print(f"   ({report}: {e})")
            continue
        for case in root.iter("testcase"):
            failed = case.find("failure") is not None or case.find("error") is not None
            rows.append((float(case.get("time", "0")), run, case.get("classname", ""), case.get("name", ""), failed))
    rows.sort(key=lambda r: r[0], reverse=True)
    for seconds, run, binary, name, failed in rows[:n]:
        print(f"   {seconds:8.1f} s  [{run}] {binary} {name}{'  FAILED' if failed else ''}")
    if not rows:
        print("   (no JUnit report)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
