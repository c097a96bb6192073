"""The bad-input sweep of the Python API: missing, empty, truncated, odd-length, garbage,
oversized-parameter and damaged inputs to every function. Each case must raise a Python
exception (``inpath.InpathError`` for bad data and settings, ``TypeError``/``OverflowError``
for values of the wrong kind) with the expected text, never crash the interpreter, and leave the
caller's buffers unchanged.
"""

import os
import random
import struct
import zlib

import pytest

import inpath

KEY = bytes(range(32))
PAGE = b"lineitem|1|155190|7706|1|17|21168.23|0.04|0.02|N|O|\n" * 200
FORMATS = ["gzip", "zlib", "deflate", "lz4", "snappy", "zstd"]


def noise(n, seed=1):
    return random.Random(seed).randbytes(n)


def check_unchanged(buf, call):
    """Runs ``call(buf)`` on a bytearray copy; the buffer must be left as it was."""
    copy = bytearray(buf)
    try:
        call(copy)
    finally:
        assert bytes(copy) == bytes(buf), "the input buffer was modified"


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def fix_crc32(data):
    """Rewrites the CRC-32 trailer of a sketch or statistics file after an edit."""
    body = bytes(data[:-4])
    return body + struct.pack("<I", zlib.crc32(body))


# ---- seal / unseal


def test_default_cipher_is_authenticated():
    record = inpath.seal(PAGE, key=KEY)
    assert record[8] == 4, "cipher code 4 = AES-GCM"
    damaged = bytearray(record)
    damaged[-1] ^= 1  # the GCM tag
    # Fix the payload and header CRCs so only the tag can notice.
    payload = bytes(damaged[64:])
    damaged[52:56] = struct.pack("<I", crc32c(payload))
    damaged[60:64] = struct.pack("<I", crc32c(bytes(damaged[:60])))
    with pytest.raises(inpath.InpathError, match="authentication failed"):
        inpath.unseal(bytes(damaged), keys={1: KEY})
    with pytest.raises(inpath.InpathError, match="128 bits but the cipher needs a 256-bit key"):
        inpath.seal(PAGE, key=KEY[:16])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(key=KEY[:15], cipher="aes128-ctr"), "15"),
        (dict(key=b"", cipher="aes128-ctr"), "0"),
        (dict(key=KEY, cipher="aes512-ctr"), "cipher = aes512-ctr is out of range"),
        (dict(key=KEY, compress="rar"), "compression = rar is out of range"),
        (dict(key=KEY, compress="zstd", level=99), "99"),
        (dict(key=None, cipher="aes256-gcm"), "needs key="),
    ],
)
def test_seal_bad_settings(kwargs, message):
    check_unchanged(PAGE, lambda buf: pytest.raises(inpath.InpathError, inpath.seal, buf, **kwargs))
    with pytest.raises(inpath.InpathError, match=message):
        inpath.seal(PAGE, **kwargs)


def test_seal_bad_argument_types():
    with pytest.raises(TypeError):
        inpath.seal("text, not bytes", key=KEY)
    with pytest.raises(TypeError):
        inpath.seal(PAGE, key="not bytes")
    with pytest.raises(OverflowError):
        inpath.seal(PAGE, key=KEY, key_id=-1)
    with pytest.raises(OverflowError):
        inpath.seal(PAGE, key=KEY, key_id=1 << 32)


def sealed_header(page_len, payload_len, cipher=0, key_len=0):
    head = struct.pack("<4sBBBbBBBBIQQ16sII", b"IPSL", 1, 64, 0, 0, cipher, key_len, 0, 0, 0,
                       page_len, payload_len, bytes(16), 0, 0) + bytes(4)
    return head + struct.pack("<I", crc32c(head))


def test_unseal_bad_records():
    record = inpath.seal(PAGE, key=KEY, key_id=3)
    keys = {3: KEY}
    cases = [
        (b"", "truncated"),
        (record[:30], "truncated"),
        (record[:-5], "truncated"),
        (noise(200), "not a seal record"),
        (b"IPSL" + noise(100), "version|header"),
        (record + b"extra", "5 unexpected byte\(s\) after its end"),
    ]
    for data, message in cases:
        with pytest.raises(inpath.InpathError, match=message):
            inpath.unseal(data, keys=keys)
        check_unchanged(data, lambda buf: pytest.raises(inpath.InpathError, inpath.unseal, buf, keys=keys))
    with pytest.raises(inpath.InpathError, match="no key with id 3"):
        inpath.unseal(record, keys={1: KEY})
    with pytest.raises(inpath.InpathError, match="no key with id 3"):
        inpath.unseal(record)
    with pytest.raises(inpath.InpathError, match="authentication failed"):
        inpath.unseal(record, keys={3: bytes(32)})
    with pytest.raises(inpath.InpathError, match="more than the limit of 100 bytes"):
        inpath.unseal(record, keys=keys, max_page=100)
    with pytest.raises(OverflowError):
        inpath.unseal(record, keys=keys, max_page=-1)
    with pytest.raises(inpath.InpathError):
        inpath.unseal(record, keys={3: KEY[:7]})


def test_unseal_huge_claimed_lengths_are_refused_before_allocating():
    # A valid header CRC claiming 2^40 bytes, and one near 2^64 (which once wrapped the record
    # length around).
    huge = sealed_header(1 << 40, 1 << 40) + bytes(100)
    with pytest.raises(inpath.InpathError, match="more than the limit"):
        inpath.unseal(huge)
    with pytest.raises(inpath.InpathError):
        inpath.unseal(huge, max_page=(1 << 64) - 1)
    wrap = sealed_header((1 << 64) - 11, (1 << 64) - 11) + bytes(100)
    with pytest.raises(inpath.InpathError, match="payload length claims"):
        inpath.unseal(wrap, max_page=(1 << 64) - 1)


def test_unseal_batch_names_the_bad_record():
    records = inpath.seal_batch([PAGE, PAGE[:100], PAGE[:7]], key=KEY)
    bad = bytearray(records[1])
    bad[70] ^= 0x20
    with pytest.raises(inpath.InpathError, match="record 1"):
        inpath.unseal_batch([records[0], bytes(bad), records[2]], keys={1: KEY})
    with pytest.raises(inpath.InpathError, match="threads = 0 is out of range"):
        inpath.unseal_batch(records, keys={1: KEY}, threads=0)
    with pytest.raises(inpath.InpathError, match="threads = 0 is out of range"):
        inpath.seal_batch([PAGE], key=KEY, threads=0)


def test_mutated_records_never_open_to_other_text():
    rng = random.Random(10)
    records = [inpath.seal(PAGE[: 300 * k], key=KEY, cipher=c, compress=z)
               for k in (1, 3) for c in ("aes256-gcm", "aes256-ctr", "none") for z in ("deflate", "lz4", "none")]
    for i in range(1500):
        record = bytearray(records[i % len(records)])
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(record))
            record[at] ^= 1 << rng.randrange(8)
        try:
            page = inpath.unseal(bytes(record), keys={1: KEY})
        except inpath.InpathError:
            continue
        assert PAGE.startswith(page)


# ---- compress / decompress


@pytest.mark.parametrize("fmt", FORMATS)
def test_decompress_bad_streams(fmt):
    good = inpath.compress(PAGE, fmt)
    assert inpath.decompress(good, fmt) == PAGE
    with pytest.raises(inpath.InpathError, match="truncated"):
        inpath.decompress(good[: len(good) * 2 // 3], fmt)
    with pytest.raises(inpath.InpathError):
        inpath.decompress(noise(300, seed=len(fmt)), fmt)
    with pytest.raises(inpath.InpathError, match="limit"):
        inpath.decompress(good, fmt, limit=100)
    check_unchanged(good[:-3], lambda buf: pytest.raises(inpath.InpathError, inpath.decompress, buf, fmt))
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0x55
    damaged[len(damaged) // 2 + 1] ^= 0xAA
    if fmt != "deflate":  # raw DEFLATE has no checksum
        with pytest.raises(inpath.InpathError):
            inpath.decompress(bytes(damaged), fmt)


def test_compress_and_decompress_bad_settings():
    with pytest.raises(inpath.InpathError, match="format = rar is out of range"):
        inpath.compress(PAGE, "rar")
    with pytest.raises(inpath.InpathError, match="level = 99 is out of range"):
        inpath.compress(PAGE, "zstd", level=99)
    with pytest.raises(inpath.InpathError, match="format = rar is out of range"):
        inpath.decompress(b"xyz", "rar")
    with pytest.raises(inpath.InpathError, match="does not start like gzip"):
        inpath.decompress(b"")
    with pytest.raises(inpath.InpathError, match="does not start like gzip"):
        inpath.decompress(noise(100))
    with pytest.raises(TypeError):
        inpath.compress("text", "zstd")


# ---- sketches and statistics


def test_sketch_bad_settings_and_files():
    with pytest.raises(inpath.InpathError, match="hll_p = 30 is out of range"):
        inpath.Sketch(hll_p=30)
    s = inpath.Sketch(hll_p=8, cm=(2, 6), agms=(2, 6))
    s.update([1, 2, 3, 2])
    data = s.to_bytes()
    for bad, message in [
        (b"", "too short|shorter"),
        (data[:-10], "truncated|long"),
        (noise(len(data)), "magic"),
        (data + b"\0", "extra bytes|long"),
    ]:
        with pytest.raises(inpath.InpathError, match=message):
            inpath.Sketch.from_bytes(bad)
    flipped = bytearray(data)
    flipped[100] ^= 4
    with pytest.raises(inpath.InpathError, match="checksum"):
        inpath.Sketch.from_bytes(bytes(flipped))
    # A Fast-AGMS counter far above the item count, with a valid checksum (found by fuzzing).
    agms_at = 64 + 256 + 8 * 2 * 64
    forged = bytearray(data)
    forged[agms_at:agms_at + 8] = struct.pack("<q", 1 << 40)
    with pytest.raises(inpath.InpathError, match="Fast-AGMS counter 0"):
        inpath.Sketch.from_bytes(fix_crc32(forged))
    other = inpath.Sketch(hll_p=10)
    with pytest.raises(inpath.InpathError, match="different settings"):
        s.merge(other)


def test_statistics_bad_files():
    np = pytest.importorskip("numpy")
    stats = inpath.corr(np.arange(40, dtype=np.int32).reshape(10, 4)).statistics
    data = stats.to_bytes()
    for bad, message in [
        (b"", "too short"),
        (data[:-9], "checksum"),
        (noise(len(data)), "magic"),
    ]:
        with pytest.raises(inpath.InpathError, match=message):
            inpath.Statistics.from_bytes(bad)
    forged = bytearray(data)
    forged[12] = 7  # reserved bytes (found by fuzzing)
    with pytest.raises(inpath.InpathError, match="reserved bytes"):
        inpath.Statistics.from_bytes(fix_crc32(forged))


def test_corr_bad_arrays():
    np = pytest.importorskip("numpy")
    # InpathError is a ValueError; shape errors are raised as ValueError.
    with pytest.raises(ValueError, match="expected a 2-D array"):
        inpath.corr(np.arange(10.0))  # 1-D
    with pytest.raises(ValueError, match="expected a 2-D array"):
        inpath.corr(np.zeros((2, 2, 2)))  # 3-D
    with pytest.raises(ValueError, match="stream"):
        inpath.corr(np.zeros((3, 1)))  # one stream
    with pytest.raises(ValueError, match="NaN"):
        inpath.corr(np.array([[1.0, np.nan], [2.0, 3.0]]))
    with pytest.raises((ValueError, TypeError)):
        inpath.corr(np.array([["a", "b"], ["c", "d"]]))
    a = np.arange(20.0).reshape(10, 2)
    before = a.copy()
    inpath.corr(a)
    assert (a == before).all()
