#!/usr/bin/env python3
"""Checks that the Python extension builds from the workspace's own artifacts.

The gate (scripts/test.sh) compiles every crate of the workspace once, then `pip install
./python` builds the extension with the same profile and target directory. Cargo resolves a
package's features from the packages it builds, so a dependency that the workspace builds with
more features (one turned on by inpath-flight's tonic, say) is compiled a second time for the
extension, with every crate above it: DataFusion and inpath-query, about 150 s on 2 cores.
This compares the two resolutions with `cargo tree` (about a second) and names every package
whose features differ, with the line to add to python/Cargo.toml.

    python3 scripts/check_features.py        exit 0: the same; 1: they differ (listed)
"""

import subprocess
import sys


def features(args):
    """{package: its features} as `cargo tree` resolves them for `args`."""
    out = subprocess.run(
        ["cargo", "tree", "--quiet", "--edges", "normal,build", "--prefix", "none",
         "--format", "{p}|{f}", *args],
        capture_output=True, text=True, check=True,
    ).stdout
    resolved = {}
    for line in out.splitlines():
        if "|" not in line:
            continue
        package, names = line.replace(" (*)", "").split("|", 1)
        resolved.setdefault(package.strip(), set()).update(n for n in names.split(",") if n)
    return resolved


def main():
    workspace = features(["--workspace"])
    extension = features(["-p", "inpath-python"])
    differ = []
    for package, names in sorted(extension.items()):
        missing = sorted(workspace.get(package, set()) - names)
        if missing:
            differ.append((package, missing))
    if not differ:
        print("check_features: the Python extension resolves every dependency as the workspace does")
        return 0
    print("check_features: the Python extension would compile these again, with fewer features than "
          "the workspace build (add them to python/Cargo.toml's [dependencies]):", file=sys.stderr)
    for package, missing in differ:
        name, version = package.split()[:2]
        print(f"  {name} {version}: {', '.join(missing)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
