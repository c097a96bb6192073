//! Streaming codecs: round trips under any chunking, exact header bytes, multi-member and
//! multi-frame inputs, checksums, truncation.

use crate::common::{data, Data};
use inpath_seal::codec::{compress, decompress, Compressor, Decompressor, Format};
use inpath_seal::Error;

fn chunked_compress(format: Format, input: &[u8], chunk: usize) -> Vec<u8> {
    let mut c = Compressor::new(format, None).unwrap();
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        c.push(piece, &mut out).unwrap();
    }
    c.finish(&mut out).unwrap();
    out
}

fn chunked_decompress(format: Format, input: &[u8], chunk: usize) -> Result<Vec<u8>, Error> {
    let mut d = Decompressor::new(format);
    let mut out = Vec::new();
    for piece in input.chunks(chunk.max(1)) {
        d.push(piece, &mut out)?;
    }
    d.finish(&mut out)?;
    Ok(out)
}

#[test]
fn round_trips_any_size_kind_and_chunking() {
    for format in Format::ALL {
        for len in [
            0usize, 1, 15, 16, 17, 63, 64, 65, 4096, 65_535, 65_536, 65_537, 118_784, 300_000,
        ] {
            for kind in [Data::Random, Data::Zero, Data::Text] {
                let input = data(kind, len, len as u64 + 1);
                let whole = compress(format, None, &input).unwrap();
                for chunk in [1usize, 7, 4096, usize::MAX] {
                    if chunk == 1 && len > 4096 {
                        continue;
                    }
                    let packed = chunked_compress(format, &input, chunk.min(input.len().max(1)));
                    assert_eq!(
                        packed, whole,
                        "{format:?} {len} {kind:?}: compressed bytes depend on chunking ({chunk})"
                    );
                    let back = chunked_decompress(format, &whole, chunk.min(whole.len())).unwrap();
                    assert_eq!(back, input, "{format:?} {len} {kind:?} chunk {chunk}");
                }
            }
        }
    }
}

#[test]
fn header_bytes_are_the_standard_ones() {
    let out = compress(Format::Gzip, None, b"x").unwrap();
    assert_eq!(&out[..3], &[0x1f, 0x8b, 0x08]);
    let out = compress(Format::Lz4, None, b"x").unwrap();
    assert_eq!(&out[..4], &[0x04, 0x22, 0x4d, 0x18]);
    let out = compress(Format::Snappy, None, b"x").unwrap();
    assert_eq!(&out[..10], b"\xff\x06\x00\x00sNaPpY");
    let out = compress(Format::Zstd, None, b"x").unwrap();
    assert_eq!(&out[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
    let out = compress(Format::Zlib, None, b"x").unwrap();
    assert_eq!((u16::from(out[0]) << 8 | u16::from(out[1])) % 31, 0);
    for format in Format::ALL {
        let out = compress(format, None, b"hello").unwrap();
        let detected = Format::detect(&out);
        if format == Format::Deflate {
            assert_eq!(detected, None);
        } else {
            assert_eq!(detected, Some(format));
        }
    }
}

#[test]
fn concatenated_members_and_frames_decode_to_the_concatenation() {
    let a = data(Data::Text, 70_000, 1);
    let b = data(Data::Random, 1000, 2);
    for format in [Format::Gzip, Format::Lz4, Format::Zstd, Format::Snappy] {
        let mut both = compress(format, None, &a).unwrap();
        both.extend(compress(format, None, &b).unwrap());
        let mut want = a.clone();
        want.extend(&b);
        for chunk in [13, 65536, usize::MAX] {
            assert_eq!(
                chunked_decompress(format, &both, chunk.min(both.len())).unwrap(),
                want,
                "{format:?}"
            );
        }
    }
}

#[test]
fn skippable_frames_are_skipped() {
    let a = data(Data::Text, 5000, 3);
    let skippable = |n: u8| {
        let mut f = vec![0x50 + n, 0x2a, 0x4d, 0x18, 5, 0, 0, 0];
        f.extend_from_slice(b"skip!");
        f
    };
    for format in [Format::Lz4, Format::Zstd] {
        let mut stream = skippable(0);
        stream.extend(compress(format, None, &a).unwrap());
        stream.extend(skippable(15));
        assert_eq!(
            chunked_decompress(format, &stream, 3).unwrap(),
            a,
            "{format:?}"
        );
    }
    // Snappy: padding (0xfe) and reserved skippable (0x80..0xfd) chunks.
    let mut stream = compress(Format::Snappy, None, &a).unwrap();
    stream.extend([0xfe, 2, 0, 0, 0, 0, 0x99, 1, 0, 0, 7]);
    assert_eq!(decompress(Format::Snappy, &stream, u64::MAX).unwrap(), a);
    // ... but reserved unskippable chunks are errors.
    let mut bad = compress(Format::Snappy, None, &a).unwrap();
    bad.extend([0x02, 1, 0, 0, 7]);
    assert!(matches!(
        decompress(Format::Snappy, &bad, u64::MAX),
        Err(Error::Corrupt { .. })
    ));
}

/// A gzip member with every optional header field, built by hand around our raw DEFLATE.
fn gzip_member_with_all_flags(payload: &[u8], good_hcrc: bool) -> Vec<u8> {
    let mut m = vec![0x1f, 0x8b, 8, 0x1e | 1, 1, 2, 3, 4, 2, 3];
    m.extend([4, 0, b'a', b'b', 2, 0]); // FEXTRA: one subfield "ab" of length 0... (4 bytes)
    m.extend(b"name.txt\0");
    m.extend(b"a comment\0");
    let crc16 = (crc32fast::hash(&m) & 0xffff) as u16 ^ if good_hcrc { 0 } else { 1 };
    m.extend(crc16.to_le_bytes());
    m.extend(compress(Format::Deflate, Some(9), payload).unwrap());
    m.extend(crc32fast::hash(payload).to_le_bytes());
    m.extend((payload.len() as u32).to_le_bytes());
    m
}

#[test]
fn gzip_header_flags_and_checksums() {
    let text = data(Data::Text, 10_000, 5);
    let member = gzip_member_with_all_flags(&text, true);
    for chunk in [1, 5, usize::MAX] {
        assert_eq!(
            chunked_decompress(Format::Gzip, &member, chunk.min(member.len())).unwrap(),
            text
        );
    }
    let bad = gzip_member_with_all_flags(&text, false);
    assert!(matches!(
        decompress(Format::Gzip, &bad, u64::MAX),
        Err(Error::StreamChecksum {
            what: "header CRC-16",
            ..
        })
    ));
    let mut bad_crc = compress(Format::Gzip, None, &text).unwrap();
    let n = bad_crc.len();
    bad_crc[n - 8] ^= 1;
    assert!(matches!(
        decompress(Format::Gzip, &bad_crc, u64::MAX),
        Err(Error::StreamChecksum {
            what: "member trailer CRC-32",
            ..
        })
    ));
    let mut bad_size = compress(Format::Gzip, None, &text).unwrap();
    bad_size[n - 1] ^= 1;
    assert!(matches!(
        decompress(Format::Gzip, &bad_size, u64::MAX),
        Err(Error::Corrupt { format: "gzip", .. })
    ));
}

#[test]
fn checksums_inside_streams_are_checked() {
    let text = data(Data::Text, 100_000, 6);
    // LZ4 content checksum (last 4 bytes).
    let mut lz4 = compress(Format::Lz4, None, &text).unwrap();
    let n = lz4.len();
    lz4[n - 1] ^= 1;
    assert!(matches!(
        decompress(Format::Lz4, &lz4, u64::MAX),
        Err(Error::StreamChecksum {
            what: "content",
            ..
        })
    ));
    // LZ4 header checksum.
    let mut lz4 = compress(Format::Lz4, None, &text).unwrap();
    lz4[6] ^= 1;
    assert!(matches!(
        decompress(Format::Lz4, &lz4, u64::MAX),
        Err(Error::StreamChecksum {
            what: "frame descriptor",
            ..
        })
    ));
    // Snappy chunk CRC (first data chunk's CRC starts at byte 14).
    let mut sz = compress(Format::Snappy, None, &text).unwrap();
    sz[14] ^= 1;
    assert!(matches!(
        decompress(Format::Snappy, &sz, u64::MAX),
        Err(Error::StreamChecksum { .. })
    ));
    // zlib Adler-32 (last 4 bytes).
    let mut z = compress(Format::Zlib, None, &text).unwrap();
    let n = z.len();
    z[n - 1] ^= 1;
    assert!(matches!(
        decompress(Format::Zlib, &z, u64::MAX),
        Err(Error::Corrupt { format: "zlib", .. })
    ));
    // Zstd content checksum.
    let mut zs = compress(Format::Zstd, None, &text).unwrap();
    let n = zs.len();
    zs[n - 1] ^= 1;
    assert!(matches!(
        decompress(Format::Zstd, &zs, u64::MAX),
        Err(Error::Corrupt { format: "zstd", .. })
    ));
}

#[test]
fn truncated_streams_are_errors_for_every_format() {
    let text = data(Data::Text, 50_000, 7);
    for format in Format::ALL {
        let full = compress(format, None, &text).unwrap();
        for cut in [0, 1, 3, full.len() / 2, full.len() - 1] {
            if cut == 0 && format == Format::Snappy {
                // python-snappy writes nothing for empty input: an empty stream is valid.
                assert_eq!(decompress(format, &[], u64::MAX).unwrap(), b"");
                continue;
            }
            let err = decompress(format, &full[..cut], u64::MAX).unwrap_err();
            assert!(err.is_damage(), "{format:?} cut {cut}: {err:?}");
            assert!(
                matches!(err, Error::Truncated { .. }),
                "{format:?} cut {cut}: {err:?}"
            );
        }
    }
}

#[test]
fn trailing_garbage_and_bad_magic() {
    let text = data(Data::Text, 1000, 8);
    for format in [Format::Zlib, Format::Deflate] {
        let mut s = compress(format, None, &text).unwrap();
        s.extend_from_slice(b"junk");
        assert!(
            matches!(
                decompress(format, &s, u64::MAX),
                Err(Error::TrailingData { bytes: 4, .. })
            ),
            "{format:?}"
        );
    }
    for format in [Format::Gzip, Format::Lz4] {
        let mut s = compress(format, None, &text).unwrap();
        s.extend_from_slice(b"junkjunkjunk");
        assert!(
            matches!(
                decompress(format, &s, u64::MAX),
                Err(Error::BadMagic { .. })
            ),
            "{format:?}"
        );
    }
    // In a Snappy stream, `j` (0x6a) reads as a reserved unskippable chunk type.
    let mut s = compress(Format::Snappy, None, &text).unwrap();
    s.extend_from_slice(b"junkjunkjunk");
    assert!(matches!(
        decompress(Format::Snappy, &s, u64::MAX),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(
        decompress(Format::Zstd, b"junkjunk", u64::MAX),
        Err(Error::Corrupt { .. })
    ));
}

#[test]
fn output_limit_and_bounded_spill() {
    let zeros = vec![0u8; 20 << 20];
    for format in Format::ALL {
        let packed = compress(format, None, &zeros).unwrap();
        assert!(
            matches!(
                decompress(format, &packed, 1 << 20),
                Err(Error::TooLarge { .. })
            ),
            "{format:?}"
        );
        // push_to hands the output over in pieces of about 1 MiB.
        let mut d = Decompressor::new(format);
        let mut scratch = Vec::new();
        let mut total = 0usize;
        let mut biggest = 0usize;
        d.push_to(&packed, &mut scratch, &mut |piece: &[u8]| {
            total += piece.len();
            biggest = biggest.max(piece.len());
            Ok(())
        })
        .unwrap();
        let mut rest = Vec::new();
        d.finish(&mut rest).unwrap();
        assert_eq!(total + rest.len(), zeros.len(), "{format:?}");
        assert!(biggest < 8 << 20, "{format:?}: a piece of {biggest} bytes");
    }
}

#[test]
fn levels_are_validated() {
    assert!(matches!(
        Compressor::new(Format::Gzip, Some(10)),
        Err(Error::Parameter { .. })
    ));
    assert!(matches!(
        Compressor::new(Format::Lz4, Some(1)),
        Err(Error::Parameter { .. })
    ));
    assert!(Compressor::new(Format::Zstd, Some(19)).is_ok());
    assert!(matches!(
        Format::parse("brotli"),
        Err(Error::Parameter { .. })
    ));
}
