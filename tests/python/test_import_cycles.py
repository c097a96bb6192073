"""scripts/import_cycles.py: no two files of a crate import each other (CONTRIBUTING.md, "The
shape of a crate"), and the check finds the circles it is there to find. Standard library and
pytest only."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "import_cycles.py")


def run(root):
    out = subprocess.run([sys.executable, SCRIPT, "--json", "--root", str(root)],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json.loads(out.stdout)


def crate(tmp_path, files):
    src = tmp_path / "crates" / "x" / "src"
    for name, text in files.items():
        path = src / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_workspace_has_no_circle():
    code, report = run(ROOT)
    assert report["crates"] >= 14, report
    assert report["circles"] == [], json.dumps(report["circles"], indent=2)
    assert code == 0


def test_two_files_that_import_each_other_are_a_circle(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod a;\nmod b;\npub use a::A;\n",
        "a.rs": "use crate::b::B;\npub struct A(B);\n",
        "b.rs": "pub struct B;\npub fn f() -> crate::a::A { todo!() }\n",
    })
    code, report = run(root)
    assert code == 1
    assert [sorted(os.path.basename(f) for f in c["files"]) for c in report["circles"]] == [["a.rs", "b.rs"]]


def test_a_child_and_its_parent_through_super_are_a_circle(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod arch;\n",
        "arch/mod.rs": "mod ni;\npub struct Keys;\npub fn run() { ni::go(); self::ni::go() }\n",
        "arch/ni.rs": "use super::Keys;\npub fn go() {}\n",
    })
    code, report = run(root)
    assert code == 1
    assert [sorted(os.path.basename(f) for f in c["files"]) for c in report["circles"]] == [["mod.rs", "ni.rs"]]


def test_leaves_re_exports_comments_and_strings_are_no_circle(tmp_path):
    root = crate(tmp_path, {
        "lib.rs": "mod common;\nmod a;\nmod b;\npub use a::A;\npub use b::B;\n",
        "common.rs": "pub struct Shared;\n",
        "a.rs": "use crate::common::Shared;\n// uses crate::b::B in a comment only\npub struct A(Shared);\n",
        "b.rs": "use crate::common::Shared;\npub struct B(Shared);\npub const S: &str = \"crate::a::A\";\n",
    })
    code, report = run(root)
    assert (code, report["circles"]) == (0, [])
