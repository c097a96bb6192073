#!/usr/bin/env python3
"""Runs the Rust test binaries of some of the workspace's crates, as the workspace build made them.

    python3 scripts/test_bins.py inpath-sketch inpath-seal [-- TEST-ARGS...]

`cargo test -p CRATE` resolves CRATE's features on its own and may rebuild it and what it shares
with the rest of the workspace; this asks cargo for the binaries of `cargo test --release
--workspace` (built already: nothing compiles but what changed) and runs those of the named
crates, unit tests and integration tests alike. Extra arguments after `--` go to every binary
(a name filter, `--include-ignored`). Exits non-zero if any binary fails, after running them all.
"""
import json
import os
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        extra = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    wanted = set(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    meta = json.loads(subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"],
                                     cwd=root, check=True, capture_output=True, text=True).stdout)
    members = {p["name"]: p for p in meta["packages"]}
    unknown = sorted(wanted - set(members))
    if unknown:
        print(f"test_bins.py: not a crate of this workspace: {', '.join(unknown)} "
              f"(crates: {', '.join(sorted(members))})", file=sys.stderr)
        return 2
    build = subprocess.run(["cargo", "test", "--release", "--workspace", "--no-run", "--quiet",
                            "--message-format=json"], cwd=root, stdout=subprocess.PIPE, text=True)
    if build.returncode != 0:
        return build.returncode
    names_by_id = {p["id"]: name for name, p in members.items()}
    bins = []
    for line in build.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        name = names_by_id.get(msg.get("package_id"))
        if name in wanted:
            bins.append((name, msg["target"]["name"], msg["target"]["kind"][0], msg["executable"]))
    failed = []
    for name, target, kind, exe in sorted(bins):
        print(f"== {name}: {kind} {target}", flush=True)
        # Integration tests find the package's files and binaries as under `cargo test`.
        pkg_dir = os.path.dirname(members[name]["manifest_path"])
        env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir)
        if subprocess.run([exe, *extra], cwd=pkg_dir, env=env).returncode != 0:
            failed.append(f"{name} {kind} {target}")
    if failed:
        print(f"test_bins.py: failed: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
