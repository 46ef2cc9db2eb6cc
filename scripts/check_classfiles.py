#!/usr/bin/env python3
"""Checks that a jar's classes load on the Java its line targets: every .class has a class file
version no newer than --java's (Java 8 reads up to 52, Java 17 up to 61), the jar's
build.properties says the same Java, and the plugin's entry class is Java 8's (52) in every line,
so that an older JVM loads it and is told what it needs.

The class file version is what a JVM checks first. That the classes call no API newer than their
target is javac's `--release` check when build.gradle compiles them; this script does not repeat it.

Usage: check_classfiles.py --java 8 JAR...   (exits 1 naming every class that is too new)
"""
import argparse
import sys
import zipfile

ENTRY_CLASS = "horovod/rs/spark/HorovodPlugin.class"
BUILD_PROPERTIES = "horovod/rs/spark/build.properties"
MAGIC = b"\xca\xfe\xba\xbe"


def major_version(header):
    """The class file major version of a .class file's first 8 bytes (None if not a class file)."""
    return int.from_bytes(header[6:8], "big") if header[:4] == MAGIC else None


def declared_java(jar):
    try:
        text = jar.read(BUILD_PROPERTIES).decode("utf-8")
    except KeyError:
        return None
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    return values.get("java")


def check_jar(path, java):
    """Problems of one jar, as lines to print."""
    newest = 44 + java
    problems = []
    with zipfile.ZipFile(path) as jar:
        classes = [name for name in jar.namelist() if name.endswith(".class")]
        if not classes:
            return [f"{path}: no classes"]
        for name in classes:
            with jar.open(name) as member:
                major = major_version(member.read(8))
            if major is None:
                problems.append(f"{path}: {name} is not a class file")
            elif major > newest:
                problems.append(f"{path}: {name} has class file version {major}, newer than Java {java}'s {newest}")
            elif name == ENTRY_CLASS and major != 52:
                problems.append(f"{path}: {name} has class file version {major}; the entry class must be Java 8's (52)")
        if ENTRY_CLASS not in classes:
            problems.append(f"{path}: no {ENTRY_CLASS}")
        declared = declared_java(jar)
        if declared != str(java):
            problems.append(f"{path}: {BUILD_PROPERTIES} says java={declared}, expected {java}")
        if not problems:
            print(f"{path}: {len(classes)} classes, all for Java {java} or older")
    return problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--java", type=int, required=True, help="the Java release the jars target (8, 17)")
    parser.add_argument("jars", nargs="+")
    args = parser.parse_args(argv)
    problems = [problem for jar in args.jars for problem in check_jar(jar, args.java)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
