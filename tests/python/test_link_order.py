"""scripts/link_order.py --refresh: a listed function an edit renamed is listed again under its
new name, in its place; what cannot be told apart is dropped, never guessed."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = importlib.util.spec_from_file_location(
    "link_order", os.path.join(ROOT, "scripts", "link_order.py"))
link_order = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(link_order)


def legacy(path, hash_, suffix=None):
    """A legacy-mangled name: _ZN <len><ident>... 17h<16 hex>E [.llvm.N]."""
    parts = "".join(f"{len(p)}{p}" for p in path.split("::"))
    name = f"_ZN{parts}17h{hash_:016x}E"
    return f"{name}.llvm.{suffix}" if suffix is not None else name


def refreshed(order, symbols, monkeypatch):
    monkeypatch.setattr(link_order, "text_symbols", lambda binary: list(symbols))
    return link_order.refresh(order, "unused")


def test_stable_key_drops_hash_and_suffix_only():
    a = legacy("inpath_query::offload::device::Lane::next", 0x1234, 77)
    b = legacy("inpath_query::offload::device::Lane::next", 0xabcd)
    assert link_order.stable_key(a) == link_order.stable_key(b)
    assert link_order.unsuffixed(a) == legacy("inpath_query::offload::device::Lane::next", 0x1234)
    other = legacy("inpath_query::offload::device::Lane::nexts", 0x1234)
    assert link_order.stable_key(other) != link_order.stable_key(a)
    v0 = "_RNvCs1234_5crate3foo.llvm.99"
    assert link_order.stable_key(v0) == "_RNvCs1234_5crate3foo"


def test_present_names_keep_their_order(monkeypatch):
    order = [legacy(f"c::f{i}", i) for i in range(5)]
    symbols = list(reversed(order)) + [legacy("c::unlisted", 9)]
    out, stale, put = refreshed(order, symbols, monkeypatch)
    assert (out, stale, put) == (order, 0, 0)


def test_a_new_suffix_takes_the_old_names_place(monkeypatch):
    first, last = legacy("c::first", 1), legacy("c::last", 2)
    moved_old = legacy("c::moved", 3, suffix=111)
    moved_new = legacy("c::moved", 3, suffix=222)
    out, stale, put = refreshed([first, moved_old, last], [last, moved_new, first], monkeypatch)
    assert out == [first, moved_new, last]
    assert (stale, put) == (1, 1)


def test_copies_of_one_function_follow_their_units_new_suffix(monkeypatch):
    # `write_str` is promoted from three codegen units; only unit 111 changed (now 222). Its
    # unambiguous name `c::only_here` says so, and the copy with suffix 222 is taken.
    copy = lambda suffix: legacy("alloc::string::write_str", 5, suffix=suffix)
    only_old, only_new = legacy("c::only_here", 6, suffix=111), legacy("c::only_here", 6, suffix=222)
    order = [only_old, copy(111)]
    symbols = [only_new, copy(222), copy(333), copy(444)]
    out, stale, put = refreshed(order, symbols, monkeypatch)
    assert out == [only_new, copy(222)]
    assert (stale, put) == (2, 2)


def test_a_renumbered_impl_block_matches_without_the_hash(monkeypatch):
    old = legacy("inpath_query::device::Lanes::take", 0x10)
    new = legacy("inpath_query::device::Lanes::take", 0x20)
    out, _, put = refreshed([old], [new], monkeypatch)
    assert out == [new] and put == 1


def test_too_many_instances_are_dropped_not_guessed(monkeypatch):
    # A generic function's instances share one name without the hash: with one stale name and
    # six unlisted instances, which one ran cannot be told.
    old = legacy("alloc::vec::Vec<T>::from_iter", 0x1)
    instances = [legacy("alloc::vec::Vec<T>::from_iter", 0x100 + i) for i in range(6)]
    kept = legacy("c::kept", 7)
    out, stale, put = refreshed([kept, old], [kept, *instances], monkeypatch)
    assert out == [kept]
    assert (stale, put) == (1, 0)


def test_a_name_is_listed_once(monkeypatch):
    # Two stale names that both map to the same new one: it is listed at the first's place.
    a, b = legacy("c::g", 1, suffix=1), legacy("c::g", 1, suffix=2)
    new = legacy("c::g", 1, suffix=3)
    out, _, _ = refreshed([a, legacy("c::h", 2), b], [new, legacy("c::h", 2)], monkeypatch)
    assert out == [new, legacy("c::h", 2)]


def run_script(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "link_order.py"), *args],
                          capture_output=True, text=True)


def test_refresh_without_a_layout_says_so_and_writes_nothing(tmp_path):
    missing = tmp_path / "symbol-order.txt"
    # Any existing file stands for the binary: the missing list is found first.
    run = run_script("--refresh", "--binary", __file__, "--output", str(missing))
    assert run.returncode != 0
    assert "no layout to refresh" in run.stderr and "Traceback" not in run.stderr
    assert not missing.exists()


def test_refresh_without_the_binary_names_it(tmp_path):
    listed = tmp_path / "symbol-order.txt"
    listed.write_text("_ZN1c1f17h0000000000000001E\n")
    run = run_script("--refresh", "--binary", str(tmp_path / "inpath"), "--output", str(listed))
    assert run.returncode != 0
    assert "cargo build --release -p inpath-cli first" in run.stderr
    assert listed.read_text() == "_ZN1c1f17h0000000000000001E\n"


def test_a_file_nm_cannot_read_is_a_clear_error(tmp_path):
    listed = tmp_path / "symbol-order.txt"
    listed.write_text("_ZN1c1f17h0000000000000001E\n")
    not_elf = tmp_path / "inpath"
    not_elf.write_text("not an executable\n")
    run = run_script("--refresh", "--binary", str(not_elf), "--output", str(listed))
    assert run.returncode != 0
    assert "nm failed on" in run.stderr and "Traceback" not in run.stderr
    assert listed.read_text() == "_ZN1c1f17h0000000000000001E\n"
