#!/usr/bin/env python3
"""Checks the native code inside jars and wheels: every shared library needs no glibc symbol
newer than --glibc (readelf's version needs), every jar has a library for each --platforms
entry and lists exactly those in native/platforms.txt, and with --wheel-tags there is one wheel
per tag and platform, whose extension module is the one its tag's interpreters load
(_native.abi3.so in an abi3 wheel, _native.cpython-310-x86_64-linux-gnu.so in a cp310 one).

Usage: check_native.py --glibc 2.17 --platforms linux-x86_64,linux-aarch64 [--wheel-tags cp310-cp310,cp311-abi3]
       FILE_OR_DIR...
(directories are searched for *.jar and *.whl; sources jars have no native code and are skipped).
Prints one line per library and exits 1 on the first kind of problem it reports.
"""
import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GLIBC = re.compile(r"Name: GLIBC_(\d+(?:\.\d+)+)")
MACHINE = re.compile(r"Machine:\s+(.+)")
# horovod_rs-<version>-<python tag>-<abi tag>-<platform tags>.whl, e.g. ...-cp310-cp310-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
WHEEL = re.compile(r"^horovod_rs-[^-]+-(?P<python>cp\d+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$")


def version(text):
    return tuple(int(part) for part in text.split("."))


def archives(paths):
    for path in map(Path, paths):
        found = sorted(path.rglob("*.jar")) + sorted(path.rglob("*.whl")) if path.is_dir() else [path]
        yield from (p for p in found if not p.name.endswith("-sources.jar"))


def readelf(args, library):
    return subprocess.run(["readelf", *args, str(library)], check=True, capture_output=True, text=True).stdout


def check_library(archive, name, data, newest_allowed):
    """Problems with one library; prints what it needs."""
    with tempfile.NamedTemporaryFile(suffix=".so") as library:
        library.write(data)
        library.flush()
        needs = sorted({match for match in GLIBC.findall(readelf(["--version-info", "--wide"], library.name))},
                       key=version)
        machine = MACHINE.search(readelf(["--file-header"], library.name)).group(1).strip()
    newest = needs[-1] if needs else "none"
    print("%s!%s (%s): newest glibc symbol version %s" % (archive.name, name, machine, newest))
    if needs and version(newest) > version(newest_allowed):
        return ["%s!%s needs GLIBC_%s, newer than %s" % (archive.name, name, newest, newest_allowed)]
    return []


def check_platforms(archive, names, expected):
    if "horovod/rs/spark/HorovodPlugin.class" not in names:
        return []  # a wheel, or a jar of other classes (examples, tests)
    listed = zipfile.ZipFile(archive).read("native/platforms.txt").decode().split()
    present = sorted({name.split("/")[1] for name in names if name.startswith("native/") and name.endswith(".so")})
    problems = []
    if sorted(listed) != sorted(expected):
        problems.append("%s: native/platforms.txt lists %s, expected %s" % (archive.name, listed, expected))
    if present != sorted(expected):
        problems.append("%s: has libraries for %s, expected %s" % (archive.name, present, expected))
    return problems


def check_wheels(wheels, tags, platforms):
    """Problems with the wheels as a set: one per tag and platform, each with its tag's module."""
    problems, found = [], {}
    for wheel in wheels:
        match = WHEEL.match(wheel.name)
        if not match:
            problems.append("%s: not a horovod_rs wheel name" % wheel.name)
            continue
        arch = match["platform"].split(".")[0].split("_", 1)[1]
        tag = "%s-%s" % (match["python"], match["abi"])
        found[tag, arch] = found.get((tag, arch), 0) + 1
        expected = ("horovod_rs/_native.abi3.so" if match["abi"] == "abi3"
                    else "horovod_rs/_native.cpython-%s-%s-linux-gnu.so" % (match["python"][2:], arch))
        modules = [name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("horovod_rs/_native.")]
        print("%s: %s" % (wheel.name, ", ".join(modules) or "no extension module"))
        if modules != [expected]:
            problems.append("%s: has %s, expected %s" % (wheel.name, modules, expected))
    for tag in tags:
        for platform in platforms:
            count = found.get((tag, platform.split("-", 1)[1]), 0)
            if count != 1:
                problems.append("%d %s wheels for %s, expected one" % (count, tag, platform))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--glibc", required=True, help="newest glibc symbol version allowed, e.g. 2.17")
    parser.add_argument("--platforms", required=True, help="platforms every jar must carry, comma-separated")
    parser.add_argument("--wheel-tags", help="interpreter-abi tags with one wheel per platform, comma-separated")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    expected = sorted(args.platforms.split(","))
    problems, libraries = [], 0
    if args.wheel_tags:
        wheels = [archive for archive in archives(args.paths) if archive.suffix == ".whl"]
        problems += check_wheels(wheels, args.wheel_tags.split(","), expected)
    for archive in archives(args.paths):
        with zipfile.ZipFile(archive) as zipped:
            names = zipped.namelist()
            for name in names:
                if name.endswith(".so"):
                    libraries += 1
                    problems += check_library(archive, name, zipped.read(name), args.glibc)
        problems += check_platforms(archive, names, expected)
    if libraries == 0:
        problems.append("no native library found in %s" % " ".join(args.paths))
    for problem in problems:
        print("FAILED " + problem)
    print("check_native: %d libraries, %d problems" % (libraries, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
