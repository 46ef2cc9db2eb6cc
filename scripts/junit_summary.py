#!/usr/bin/env python3
"""Prints the JUnit results Gradle wrote: each failure with its message, then one closing line.

Gradle runs quietly in the Makefile; this is what a reader of `make test` sees of the JVM tests.
Usage: junit_summary.py RESULTS_DIR...   (exits 1 if a test failed or no test ran)
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main(dirs):
    passed = failed = skipped = 0
    for directory in dirs:
        for report in sorted(Path(directory).glob("TEST-*.xml")):
            for case in ET.parse(report).getroot().iter("testcase"):
                name = f"{case.get('classname')}.{case.get('name')}"
                problem = case.find("failure")
                if problem is None:
                    problem = case.find("error")
                if problem is not None:
                    failed += 1
                    print(f"FAILED {name}: {problem.get('message', '')[:2000]}")
                elif case.find("skipped") is not None:
                    skipped += 1
                else:
                    passed += 1
                    print(f"ok     {name} ({float(case.get('time', 0)):.2f} s)")
    print(f"junit: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
