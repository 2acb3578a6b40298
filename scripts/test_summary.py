"""The test command's closing line, from meson's build/meson-logs/testlog.json.

Counts test cases across every suite: doctest's "test cases: N | P passed |
F failed | S skipped" and the integration scripts' "passed P, failed F,
skipped S". A suite that meson saw fail (a crash, a timeout, a non-zero exit)
without reporting a failed case counts as one failure more, so the line shows
failures whenever any suite failed; a suite meson skipped whole (exit 77)
counts its reported skips, or one. Prints one line per failed suite, then
`tests: P passed, F failed, S skipped` (S: skipped integration cases and suites).
"""
import json
import re
import sys

DOCTEST = re.compile(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed")
SCRIPT = re.compile(r"passed (\d+), failed (\d+), skipped (\d+)")


def main(path):
    passed = failed = skipped = 0
    failed_suites = []
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            entries = [json.loads(line) for line in log if line.strip()]
    except (OSError, ValueError) as error:
        print(f"tests: cannot read {path}: {error}")
        print("tests: 0 passed, 1 failed")
        return
    for entry in entries:
        output = (entry.get("stdout") or "") + "\n" + (entry.get("stderr") or "")
        result = entry.get("result", "")
        suite_passed = suite_failed = suite_skipped = 0
        # doctest's own "skipped" counts the cases a suite's filter left to
        # the other suites: not skips.
        for match in DOCTEST.finditer(output):
            suite_passed += int(match.group(2))
            suite_failed += int(match.group(3))
        for match in SCRIPT.finditer(output):
            suite_passed += int(match.group(1))
            suite_failed += int(match.group(2))
            suite_skipped += int(match.group(3))
        if result == "SKIP" and suite_skipped == 0:
            suite_skipped = 1
        if result not in ("OK", "SKIP", "EXPECTEDFAIL"):
            failed_suites.append(f"{entry.get('name', '?')} ({result})")
            if suite_failed == 0:
                suite_failed = 1
        passed += suite_passed
        failed += suite_failed
        skipped += suite_skipped
    for suite in failed_suites:
        print(f"tests: suite {suite} failed")
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")


main(sys.argv[1] if len(sys.argv) > 1 else "build/meson-logs/testlog.json")
