"""Runs Horovod's own test files against horovod_rs, with only their imports changed.

    python scripts/horovod_suite.py --horovod /path/to/horovod test/parallel/test_torch.py [...]

For each file: copies it (and Horovod's test/utils) to a temporary directory, rewrites every
import of ``horovod`` to ``horovod_rs`` (import lines, and the modules ``mock.patch`` targets
name), then runs each test alone as a 2-rank
job under ``horovodrs`` (``--np``; 0 runs plain pytest, as Horovod's Spark integration tests
need), then the whole file as one job, and prints the counts and the
failures grouped by their first error line (for the whole file, from each rank's JUnit report: a
test passes when it passed on every rank with no subtest failed or skipped). Horovod's tests read their rank from MPI's
environment (PMI_RANK/PMI_SIZE), which each rank gets from horovodrs's HOROVOD_RANK/HOROVOD_SIZE.
"""

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from xml.etree import ElementTree

IMPORT = re.compile(r"^(\s*)(import|from)\s+horovod(?=[\s.])")
# "import horovod" and "import horovod.spark" (no "as") bind the name horovod, which the code
# then uses (horovod.spark.run_elastic): the rewrite binds it to horovod_rs.
BARE_IMPORT = re.compile(r"^(\s*)import\s+horovod((?:\.\w+)*)\s*$")
# mock.patch("horovod.x.y") imports horovod.x to patch y: an import by name, rewritten the same way.
PATCH_TARGET = re.compile(r"""(patch\(\s*['"])horovod\.""")
SUMMARY = re.compile(r"(\d+) (passed|failed|skipped|error|errors|xfailed|xpassed)")


def rewrite_line(line):
    bare = BARE_IMPORT.match(line.rstrip("\n"))
    if bare:
        indent, submodule = bare.groups()
        loads = "import horovod_rs%s; " % submodule if submodule else ""
        return "%s%simport horovod_rs as horovod\n" % (indent, loads)
    return PATCH_TARGET.sub(r"\1horovod_rs.", IMPORT.sub(r"\1\2 horovod_rs", line))


def rewrite(source):
    return "".join(rewrite_line(line) for line in source.splitlines(keepends=True))


def stage(horovod, path, work):
    """The test file and Horovod's test utilities under ``work``, imports rewritten."""
    target = os.path.join(work, path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    # The file's siblings (base classes), the scripts in its folders (data/: the training scripts
    # Horovod's elastic tests launch) and Horovod's test utilities come along, rewritten too.
    folder = os.path.dirname(path)
    subfolders = [os.path.join(folder, name) for name in sorted(os.listdir(os.path.join(horovod, folder)))
                  if os.path.isdir(os.path.join(horovod, folder, name))]
    for folder in [folder] + subfolders + ["test/utils"]:
        source = os.path.join(horovod, folder)
        os.makedirs(os.path.join(work, folder), exist_ok=True)
        for name in os.listdir(source) if os.path.isdir(source) else []:
            if name.endswith(".py"):
                with open(os.path.join(source, name)) as f:
                    text = rewrite(f.read())
                with open(os.path.join(work, folder, name), "w") as f:
                    f.write(text)
    return target


def collect(target):
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", target],
                         capture_output=True, text=True, cwd=os.path.dirname(target))
    tests = [line.strip() for line in out.stdout.splitlines() if "::" in line]
    if not tests:
        sys.exit("no tests collected from %s (Horovod's test dependencies: pip install mock parameterized psutil):\n%s"
                 % (target, (out.stdout + out.stderr)[-2000:]))
    return tests


def run_job(np_, args, cwd, timeout, junit=None):
    """One job of ``np_`` ranks running ``pytest args`` (``np_`` 0: one plain pytest process);
    returns (outcome counts, output). With ``junit`` (a folder), each rank also writes a JUnit
    report there (``junit-<rank>.xml``)."""
    launcher = os.path.join(os.path.dirname(sys.executable), "horovodrs")
    report = ' --junitxml="$HOROVOD_SUITE_JUNIT/junit-$HOROVOD_RANK.xml"' if junit else ""
    command = [launcher, "-np", str(np_), "sh", "-c",
               'PMI_RANK=$HOROVOD_RANK PMI_SIZE=$HOROVOD_SIZE exec "$0" -m pytest -q -p no:cacheprovider%s "$@"'
               % report, sys.executable] + args
    if np_ == 0:
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"] + \
            (["--junitxml=%s" % os.path.join(junit, "junit-0.xml")] if junit else []) + args
    env = dict(os.environ, HOROVOD_SUITE_JUNIT=junit or "")
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                           start_new_session=True, env=env)
    try:
        output, _ = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # the launcher and its ranks
        output, _ = job.communicate()
        return {"timeout": 1}, output
    counts = collections.Counter()
    for rank in range(max(np_, 1)):
        summary = [line for line in output.splitlines() if (np_ == 0 or line.startswith("[%d]<stdout>:" % rank))
                   and re.search(r"\d+ (passed|failed|skipped|error)", line) and " in " in line]
        for number, word in SUMMARY.findall(summary[-1] if summary else ""):
            counts[(rank, word.rstrip("s") if word.startswith("error") else word)] += int(number)
    return counts, output


def per_test(junit, np_):
    """Each test's outcome over the ranks' JUnit reports: failed if it failed on any rank (any
    subtest), passed if it passed on every rank with nothing skipped, else skipped."""
    outcomes = {}
    for rank in range(max(np_, 1)):
        path = os.path.join(junit, "junit-%d.xml" % rank)
        if not os.path.exists(path):
            continue  # the rank died before writing it: its tests count as not passed
        for case in ElementTree.parse(path).iter("testcase"):
            test = "%s::%s" % (case.get("classname"), case.get("name"))
            kinds = {child.tag for child in case}
            outcome = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
            previous = outcomes.get(test, "passed")
            outcomes[test] = min(previous, outcome, key=("failed", "skipped", "passed").index)
    return outcomes


def first_error(output):
    for line in output.splitlines():
        body = line.split(":", 1)[1] if line.startswith("[") and ">:" in line else line
        if body.startswith("E   "):
            return body[4:].strip()[:160]
    return "(no error line; see the output)"


def each_alone(tests, np_, cwd, timeout):
    outcomes, errors = collections.Counter(), collections.defaultdict(list)
    for test in tests:
        counts, output = run_job(np_, [test], cwd, timeout)
        if "timeout" in counts:
            outcome = "timeout"
        elif any(counts[(r, "failed")] or counts[(r, "error")] for r in range(max(np_, 1))) or not counts:
            outcome = "failed"
        elif all(counts[(r, "skipped")] for r in range(max(np_, 1))):
            outcome = "skipped"
        else:
            outcome = "passed"
        outcomes[outcome] += 1
        if outcome in ("failed", "timeout"):
            errors[first_error(output) if outcome == "failed" else "timed out"].append(test.split("::")[-1])
        print("  %-8s %s" % (outcome, test), flush=True)
    return outcomes, errors


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--horovod", required=True, help="a checkout of github.com/horovod/horovod")
    parser.add_argument("--np", type=int, default=2,
                        help="ranks per job; 0: one pytest process, for Horovod's Spark integration tests, which "
                             "start their own Spark and ranks")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per job")
    parser.add_argument("--mode", choices=("each", "whole", "both"), default="both")
    parser.add_argument("-k", help="only tests whose id contains this")
    parser.add_argument("files", nargs="+", help="test files, relative to the checkout")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="horovod-suite-")
    # As Horovod's test/conftest.py does: its utilities import by name (``from common import ...``).
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(work, "test", "utils")] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    try:
        for path in args.files:
            target = stage(args.horovod, path, work)
            cwd = os.path.dirname(target)
            tests = [t for t in collect(target) if not args.k or args.k in t]
            print("%s: %d tests" % (path, len(tests)), flush=True)
            if args.mode in ("each", "both"):
                outcomes, errors = each_alone(tests, args.np, cwd, args.timeout)
                print("%s, each test alone on %d ranks: %s" % (path, args.np, dict(outcomes)))
                for error, names in sorted(errors.items(), key=lambda e: -len(e[1])):
                    print("  %3d x %s\n        %s" % (len(names), error, " ".join(names)))
            if args.mode in ("whole", "both"):
                junit = tempfile.mkdtemp(dir=work)
                counts, _ = run_job(args.np, [os.path.basename(target)] + (["-k", args.k] if args.k else []), cwd,
                                    args.timeout * 10, junit)
                outcomes = per_test(junit, args.np)
                tally = collections.Counter(outcomes.values())
                print("%s, whole file on %d ranks: %d passed, %d failed, %d skipped of %d tests%s"
                      % (path, args.np, tally["passed"], tally["failed"], tally["skipped"], len(tests),
                         " (timed out)" if "timeout" in counts else ""), flush=True)
                for test in sorted(t for t, outcome in outcomes.items() if outcome == "failed"):
                    print("  failed  %s" % test)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
