"""inpath.DataSketchesHll against the Apache DataSketches library itself (the `datasketches`
package): the same items give the same registers in every image form DataSketches writes
(LIST, SET, HLL_4/6/8, compact and updatable), and inpath's images are read, estimated and
merged by DataSketches."""

import numpy as np
import pytest
from datasketches import hll_sketch, hll_union, tgt_hll_type

import inpath

TYPES = (tgt_hll_type.HLL_4, tgt_hll_type.HLL_6, tgt_hll_type.HLL_8)


@pytest.mark.parametrize("n", [0, 1, 5, 100, 3000, 150_000])
@pytest.mark.parametrize("lg_k", [4, 11, 14])
def test_same_registers_in_every_datasketches_form(n, lg_k):
    items = np.random.default_rng(n + lg_k).integers(-(1 << 62), 1 << 62, n, dtype=np.int64)
    ours = inpath.DataSketchesHll(lg_k)
    ours.update(items)
    for t in TYPES:
        theirs = hll_sketch(lg_k, t)
        for v in items.tolist():
            theirs.update(v)
        for image in (theirs.serialize_compact(), theirs.serialize_updatable()):
            assert inpath.DataSketchesHll.from_bytes(image).registers() == ours.registers(), t
    back = hll_sketch.deserialize(ours.to_bytes())
    if n:
        # Different estimators over the same registers (DataSketches' composite one with its
        # small-k constants, Ertl's): close, not equal; lg_k 4 has 16 registers.
        assert abs(back.get_estimate() / ours.estimate() - 1) < (0.1 if lg_k < 7 else 0.05)
    else:
        assert back.is_empty() and ours.estimate() == 0


def test_strings_doubles_and_unions():
    words = [f"w{i}" for i in range(20_000)] + ["", "ü", "w1"]
    ours = inpath.DataSketchesHll(12)
    ours.update(words)
    theirs = hll_sketch(12, tgt_hll_type.HLL_8)
    for w in words:
        theirs.update(w)
    assert inpath.DataSketchesHll.from_bytes(theirs.serialize_compact()).registers() == ours.registers()
    xs = [0.0, -0.0, 1.5, float("nan"), 1e300]
    d = inpath.DataSketchesHll(10)
    d.update(xs)
    t = hll_sketch(10, tgt_hll_type.HLL_8)
    for x in xs:
        t.update(x)
    assert inpath.DataSketchesHll.from_bytes(t.serialize_compact()).registers() == d.registers()
    # DataSketches' union of inpath's image and its own sketch: inpath's merge, register for
    # register, also across lg_k (the union works at the smaller one).
    other = inpath.DataSketchesHll(14)
    other.update(np.arange(50_000, dtype=np.int64))
    u = hll_union(14)
    u.update(hll_sketch.deserialize(ours.to_bytes()))
    u.update(hll_sketch.deserialize(other.to_bytes()))
    merged = inpath.DataSketchesHll.from_bytes(u.get_result(tgt_hll_type.HLL_8).serialize_compact())
    mine = inpath.DataSketchesHll(14)
    mine.merge(other)
    mine.merge(ours)
    assert merged.lg_k == mine.lg_k == 12
    assert merged.registers() == mine.registers()


def test_bad_images_are_clear_errors():
    good = inpath.DataSketchesHll(8)
    good.update(["a", "b"])
    image = bytearray(good.to_bytes())
    with pytest.raises(inpath.InpathError, match="family"):
        inpath.DataSketchesHll.from_bytes(bytes([image[0], image[1], 3]) + bytes(image[3:]))
    with pytest.raises(inpath.InpathError, match="too short"):
        inpath.DataSketchesHll.from_bytes(bytes(image[:60]))
    with pytest.raises(inpath.InpathError, match="4 to 21"):
        inpath.DataSketchesHll(25)
    with pytest.raises(TypeError, match="cannot add"):
        good.update([object()])
