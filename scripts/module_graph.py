"""The module graph of a Rust crate's top-level modules, from the `crate::` paths each uses.

    python3 scripts/module_graph.py [native/core/src]          # prints it as Mermaid
    python3 scripts/module_graph.py --omit error [...]          # without the edges into `error`
    python3 scripts/module_graph.py --check [native/core/src]  # exits 1 naming any cycle

A module may use its own submodules (`communicator::hierarchy` inside `communicator`); an edge
joins two different top-level modules. Tests (`#[cfg(test)]` blocks to the end of a file) do
not count: they may reach anywhere.
"""

import pathlib
import re
import sys

USE = re.compile(r"\bcrate::(?:\{([^}]*)\}|(\w+))")


def top_level_modules(src):
    lib = (src / "lib.rs").read_text()
    return re.findall(r"^(?:pub(?:\([^)]*\))? )?mod (\w+);", lib, re.M)


def uses(path):
    text = path.read_text()
    text = text.split("#[cfg(test)]\nmod tests", 1)[0].split("#[cfg(test)]\npub(crate) mod tests", 1)[0]
    text = re.sub(r"//[^\n]*", "", text)
    found = set()
    for group, single in USE.findall(text):
        names = [single] if single else [part.strip().split("::")[0] for part in group.split(",")]
        found.update(name for name in names if name)
    return found


def graph(src):
    modules = top_level_modules(src)
    edges = {}
    for module in modules:
        files = [src / (module + ".rs")] + sorted((src / module).rglob("*.rs")) if (src / module).is_dir() \
            else [src / (module + ".rs")]
        used = set()
        for file in files:
            if file.exists():
                used |= uses(file)
        edges[module] = sorted(m for m in used if m in modules and m != module)
    return edges


def cycles(edges):
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in edges[node]:
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in edges:
        if node not in state:
            visit(node, [node])
    return found


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    omitted = set()
    if "--omit" in args:
        at = args.index("--omit")
        omitted = set(args[at + 1].split(","))
        del args[at:at + 2]
    src = pathlib.Path(args[0] if args else "native/core/src")
    edges = graph(src)
    if check:
        loops = cycles(edges)
        for loop in loops:
            print("import cycle: " + " -> ".join(loop))
        return 1 if loops else 0
    print("graph LR")
    for module, targets in edges.items():
        for target in (t for t in targets if t not in omitted):
            print("  %s --> %s" % (module, target))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
