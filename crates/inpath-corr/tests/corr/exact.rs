//! The engine against an independent big-integer reference: statistics identical bit for bit,
//! coefficients within float rounding of the exact value.

use crate::common::*;
use inpath_core::{run_reader, run_slice, Engine, Lane, LaneOptions};
use inpath_corr::{Corr, CorrConfig, DType, Ddof, Kernel, NanPolicy, Stat, Statistics};
use num_bigint::BigInt;
use num_traits::ToPrimitive;
use rand::Rng;

#[test]
fn statistics_equal_big_integer_sums_for_every_integer_type() {
    let mut r = rng(1);
    for (case, dtype) in INT_TYPES.iter().copied().cycle().take(48).enumerate() {
        let m = r.gen_range(2..=19);
        let n = [0, 1, 2, 3, 31, 33, 64, 255, 257, 700][case % 10];
        let rows = random_ints(dtype, m, n, case as u64);
        let bytes = ints_to_bytes(dtype, &rows);
        let e = exact(&rows, m);
        // Every kernel of every level this CPU runs.
        let kernels = [Kernel::Portable, Kernel::Auto, Kernel::Tiles];
        for KernelRun { cap, kernel, name } in kernel_runs(dtype, m, &kernels, &[]) {
            let stats = run_at(config(dtype, m, kernel), cap, &bytes);
            let label = format!("{dtype} M={m} N={n} {kernel:?} at {cap} ({name})");
            assert_stats_exact(&stats, &e, &label);
            let r_all = stats.pearson(NanPolicy::Nan);
            assert_eq!(r_all.len(), m * (m - 1) / 2);
            for (z, (i, j)) in stats.pair_list().into_iter().enumerate() {
                assert_eq!(stats.pair_index(i, j), z);
                assert_eq!(stats.pair_at(z), (i, j));
                let got = r_all[z];
                match exact_pearson(&e, i, j) {
                    Some(want) if n >= 2 => assert!(
                        (got - want).abs() <= 4.0 * f64::EPSILON,
                        "{label}: r({i},{j}) = {got}, exact {want}"
                    ),
                    _ => assert!(
                        got.is_nan(),
                        "{label}: r({i},{j}) of a constant stream is {got}"
                    ),
                }
            }
        }
    }
}

/// Where the CPU has AVX-512 VNNI / IFMA (and AMX), `Kernel::Auto` runs the integer kernels
/// (so the comparisons below exercise them), `Kernel::NoAmx` never AMX and `Kernel::Tiles`
/// never the integer kernels.
#[test]
fn auto_runs_the_integer_kernels_where_the_cpu_has_them() {
    let name = |dtype, m, kernel| Corr::new(config(dtype, m, kernel)).unwrap().kernel_name();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        // Only where INPATH_ISA leaves the AVX-512 level on.
        let v4 = inpath_core::isa::effective() == inpath_core::isa::Level::Avx512;
        let base = v4 && has!("avx512f") && has!("avx512bw") && has!("avx512vl");
        let vnni = base && has!("avx512vnni") && has!("avx512vbmi");
        if vnni {
            assert_eq!(name(DType::U8, 4, Kernel::NoAmx), "avx512-vnni");
            assert_eq!(name(DType::I8, 4, Kernel::NoAmx), "avx512-vnni");
            // Beyond 512 bytes per row AMX is never used.
            assert_eq!(name(DType::U8, 513, Kernel::Auto), "avx512-vnni");
            // 8-bit rows shorter than 128 bytes stay on VNNI.
            assert_eq!(name(DType::U8, 64, Kernel::Auto), "avx512-vnni");
            let auto = name(DType::U8, 128, Kernel::Auto);
            assert!(auto == "amx-int8" || auto == "avx512-vnni", "{auto}");
        }
        if base && has!("avx512ifma") {
            for dtype in [DType::U16, DType::I16, DType::U32, DType::I32] {
                assert_eq!(name(dtype, 4, Kernel::NoAmx), "avx512-ifma");
                assert_eq!(name(dtype, 300, Kernel::Auto), "avx512-ifma");
                assert_eq!(name(dtype, 4, Kernel::Auto), "avx512-ifma");
                let auto = name(dtype, 32 * (4 / dtype.width()), Kernel::Auto);
                assert!(auto == "amx-int8" || auto == "avx512-ifma", "{auto}");
            }
        }
    }
    for dtype in [DType::U8, DType::U32, DType::U64, DType::F64] {
        assert!(name(dtype, 4, Kernel::Tiles).ends_with("-f64"));
        assert_eq!(name(dtype, 4, Kernel::Portable), "portable-f64");
    }
    for dtype in [DType::U64, DType::I64, DType::F32, DType::F64] {
        assert!(name(dtype, 4, Kernel::Auto).ends_with("-f64"));
    }
}

/// The integer kernels (AMX for up to 512 bytes per row, VNNI for 8-bit, IFMA for 16/32-bit,
/// where the CPU has them) against the f64 tile kernels: stream counts around every lane-group
/// and tile boundary, row counts around the 4-row quads, the 64-row AMX steps, the panels and
/// the widening limits (4,096 rows for IFMA, 32,768 for AMX's 32-bit sums, 65,536 for VNNI),
/// and uneven chunks (also partial rows); every integer kernel of every level this CPU runs
/// (the AVX2 ones on AVX-512 CPUs too).
#[test]
fn integer_kernels_equal_tile_kernels_at_every_boundary() {
    let mut r = rng(21);
    let types = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
    ];
    let cases: &[(usize, &[usize])] = &[
        (2, &[0, 1, 3, 4, 5, 63, 64, 65, 4095, 4097, 9000]),
        (3, &[7, 70_001]),
        (4, &[40_000]),
        (7, &[130]),
        (8, &[65]),
        (9, &[200]),
        (15, &[33]),
        (16, &[4099]),
        (17, &[66]),
        (24, &[21]),
        (31, &[13]),
        (33, &[301]),
        (48, &[9]),
        (64, &[2050]),
        (65, &[11]),
        (130, &[97]),
    ];
    for dtype in types {
        for &(m, ns) in cases {
            for &n in ns {
                if n > 20_000 && dtype.width() * m > 16 {
                    continue;
                }
                let rows = random_ints(dtype, m, n, (m * 1000 + n) as u64);
                let bytes = ints_to_bytes(dtype, &rows);
                let tiles = run(config(dtype, m, Kernel::Tiles), &bytes);
                let e = (n <= 300).then(|| exact(&rows, m));
                let skip = [Kernel::Tiles.name_for(dtype, m)];
                let kernels = [Kernel::Auto, Kernel::NoAmx];
                for KernelRun { cap, kernel, name } in kernel_runs(dtype, m, &kernels, &skip) {
                    let label = format!("{dtype} M={m} N={n} {kernel:?} at {cap} ({name})");
                    let whole = run_at(config(dtype, m, kernel), cap, &bytes);
                    assert_eq!(whole, tiles, "{label}: one update");
                    if n > 0 {
                        let chunked = run_chunked(config(dtype, m, kernel), cap, &bytes, &mut r);
                        assert_eq!(chunked.unwrap(), tiles, "{label}: uneven chunks");
                    }
                    if let Some(e) = &e {
                        assert_stats_exact(&whole, e, &label);
                    }
                }
            }
        }
    }
}

#[test]
fn portable_and_simd_kernels_give_identical_float_statistics() {
    let mut r = rng(2);
    for (dtype, m, n) in [
        (DType::F64, 13, 300),
        (DType::F32, 30, 129),
        (DType::F64, 2, 1),
    ] {
        let mut bytes = Vec::new();
        for _ in 0..n * m {
            let v: f64 = r.gen_range(-1e6..1e6) * r.gen::<f64>();
            if dtype == DType::F32 {
                bytes.extend_from_slice(&(v as f32).to_le_bytes());
            } else {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
        }
        all_kernels(dtype, m, &bytes, &format!("{dtype} M={m}"));
    }
}

#[test]
fn float_statistics_are_accurate_against_rational_arithmetic() {
    let mut r = rng(3);
    let (m, n) = (7, 2000);
    let mut values = vec![vec![0f64; m]; n];
    for row in values.iter_mut() {
        let common: f64 = r.gen_range(-10.0..10.0);
        for (s, v) in row.iter_mut().enumerate() {
            *v = common * s as f64 + r.gen_range(-100.0..100.0) + 1e3 * (s % 2) as f64;
        }
    }
    let bytes: Vec<u8> = values
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let stats = run(CorrConfig::rows(DType::F64, m), &bytes);
    // Exact rationals: every value times 2^1100 is an integer.
    let scale = 1100usize;
    let big_rows: Vec<Vec<BigInt>> = values
        .iter()
        .map(|row| row.iter().map(|v| f64_big(*v)).collect())
        .collect();
    let nb = BigInt::from(n);
    for i in 0..m {
        let si: BigInt = big_rows.iter().map(|row| &row[i]).sum();
        let want = (si.clone() >> (scale - 300)).to_f64().unwrap() / 2f64.powi(300);
        let got = stats.sum(i).to_f64();
        // Documented bound: 64-row blocks summed in f64, blocks in double-double, so the error
        // is below 64 * 2^-53 of the sum of magnitudes.
        let magnitude: f64 = values.iter().map(|row| row[i].abs()).sum();
        assert!(
            (got - want).abs() <= 64.0 * f64::EPSILON / 2.0 * magnitude,
            "sum {i}: {got} vs {want}"
        );
        for j in i + 1..m {
            let sj: BigInt = big_rows.iter().map(|row| &row[j]).sum();
            let sii: BigInt = big_rows.iter().map(|row| &row[i] * &row[i]).sum();
            let sjj: BigInt = big_rows.iter().map(|row| &row[j] * &row[j]).sum();
            let sij: BigInt = big_rows.iter().map(|row| &row[i] * &row[j]).sum();
            let c = &nb * sij - &si * &sj;
            let vi = &nb * sii - &si * &si;
            let vj = &nb * sjj - &sj * &sj;
            let d: BigInt = (vi * vj) << 480;
            let q: BigInt = (c << 480) / d.sqrt();
            let want = q.to_f64().unwrap() / 2f64.powi(240);
            let got = stats.pearson_pair(i, j, NanPolicy::Nan);
            assert!(
                (got - want).abs() <= 1e-13,
                "r({i},{j}) = {got}, exact {want}"
            );
        }
    }
}

#[test]
fn chunking_never_changes_the_result() {
    for dtype in [DType::U32, DType::I16, DType::U64, DType::F64, DType::F32] {
        let m = 5;
        let bytes = if dtype.is_float() {
            let mut r = rng(4);
            (0..m * 500)
                .flat_map(|_| {
                    let v: f64 = r.gen_range(-3.0..3.0);
                    if dtype == DType::F32 {
                        (v as f32).to_le_bytes().to_vec()
                    } else {
                        v.to_le_bytes().to_vec()
                    }
                })
                .collect()
        } else {
            ints_to_bytes(dtype, &random_ints(dtype, m, 500, 9))
        };
        let whole = run(CorrConfig::rows(dtype, m), &bytes);
        let mut r = rng(5);
        let size_sets = [vec![1usize], vec![3, 1, 7], vec![4096], vec![13, 64, 1]];
        for cap in levels() {
            for sizes in &size_sets {
                let mut corr = Corr::with_isa_cap(CorrConfig::rows(dtype, m), cap).unwrap();
                let mut at = 0;
                let mut k = 0;
                while at < bytes.len() {
                    let size = (sizes[k % sizes.len()]
                        + if sizes.len() > 1 {
                            r.gen_range(0..3)
                        } else {
                            0
                        })
                    .min(bytes.len() - at);
                    corr.update(&bytes[at..at + size]).unwrap();
                    at += size;
                    k += 1;
                }
                assert_eq!(
                    corr.finish().unwrap(),
                    whole,
                    "{dtype} chunks {sizes:?} at {cap}"
                );
            }
        }
    }
}

#[test]
fn lanes_never_change_integer_results() {
    for dtype in [DType::U8, DType::U32, DType::I64] {
        let m = 9;
        let rows = random_ints(dtype, m, 3000, 11);
        let bytes = ints_to_bytes(dtype, &rows);
        let e = exact(&rows, m);
        // Lanes are forks: they keep the engine's level.
        for cap in levels() {
            for threads in 1..=6 {
                let engine = || Corr::with_isa_cap(CorrConfig::rows(dtype, m), cap).unwrap();
                let mut corr = engine();
                run_slice(&mut corr, &bytes, threads).unwrap();
                let stats = corr.finish().unwrap();
                let label = format!("{dtype} at {cap} run_slice {threads} threads");
                assert_stats_exact(&stats, &e, &label);
                for chunk_size in [4096, 5000] {
                    let mut corr = engine();
                    let options = LaneOptions {
                        threads,
                        chunk_size,
                    };
                    run_reader(
                        &mut corr,
                        &mut &bytes[..],
                        "mem".as_ref(),
                        options,
                        &mut |_| {},
                    )
                    .unwrap();
                    let stats = corr.finish().unwrap();
                    let label = format!("{dtype} at {cap} run_reader {threads} threads");
                    assert_stats_exact(&stats, &e, &label);
                }
            }
        }
    }
}

#[test]
fn float_lanes_agree_to_rounding() {
    let m = 6;
    let mut r = rng(6);
    let bytes: Vec<u8> = (0..m * 20_000)
        .flat_map(|_| r.gen_range(-5.0f64..5.0).to_le_bytes())
        .collect();
    let one = run(CorrConfig::rows(DType::F64, m), &bytes);
    for threads in 2..=4 {
        let mut corr = Corr::new(CorrConfig::rows(DType::F64, m)).unwrap();
        run_slice(&mut corr, &bytes, threads).unwrap();
        let many = corr.finish().unwrap();
        assert_eq!(many.count(), one.count());
        for (a, b) in one
            .pearson(NanPolicy::Nan)
            .iter()
            .zip(many.pearson(NanPolicy::Nan))
        {
            assert!((a - b).abs() < 1e-14, "{a} vs {b}");
        }
    }
}

#[test]
fn merge_is_exact_and_equals_one_job() {
    let dtype = DType::I32;
    let m = 6;
    let rows = random_ints(dtype, m, 1000, 12);
    let bytes = ints_to_bytes(dtype, &rows);
    let whole = run(CorrConfig::rows(dtype, m), &bytes);
    let cut = 377 * m * 4;
    let mut a = run(CorrConfig::rows(dtype, m), &bytes[..cut]);
    let b = run(CorrConfig::rows(dtype, m), &bytes[cut..]);
    a.merge(&b).unwrap();
    assert_eq!(a, whole);
    // Lanes merge the same way, at every level.
    for cap in levels() {
        let mut x = Corr::with_isa_cap(CorrConfig::rows(dtype, m), cap).unwrap();
        let mut y = x.fork();
        x.update(&bytes[..cut]).unwrap();
        y.update(&bytes[cut..]).unwrap();
        x.close_input().unwrap();
        y.close_input().unwrap();
        x.merge(&y).unwrap();
        assert_eq!(x.finish().unwrap(), whole, "at {cap}");
    }
}

#[test]
fn column_major_equals_row_major() {
    let dtype = DType::U16;
    let m = 11;
    let rows = random_ints(dtype, m, 2500, 13);
    let whole = run(CorrConfig::rows(dtype, m), &ints_to_bytes(dtype, &rows));
    let columns: Vec<Vec<u8>> = (0..m)
        .map(|i| {
            rows.iter()
                .flat_map(|row| (row[i] as u16).to_le_bytes())
                .collect()
        })
        .collect();
    let mut corr = Corr::new(CorrConfig::rows(dtype, m)).unwrap();
    // In two blocks of rows.
    let refs: Vec<&[u8]> = columns.iter().map(|c| &c[..1000]).collect();
    corr.update_columns(&refs).unwrap();
    let refs: Vec<&[u8]> = columns.iter().map(|c| &c[1000..]).collect();
    corr.update_columns(&refs).unwrap();
    assert_eq!(corr.finish().unwrap(), whole);
}

/// 2 M rows of the largest value of each width stay exact (reference Table 3.3: 86 bits for
/// u32), in the reference's 64-byte line layouts.
#[test]
fn overflow_stress_two_million_rows_of_all_max_values() {
    const N: usize = 2 << 20;
    for (dtype, max) in [
        (DType::U8, u8::MAX as i128),
        (DType::U16, u16::MAX as i128),
        (DType::U32, u32::MAX as i128),
    ] {
        let m = dtype.per_line();
        let bytes = vec![0xffu8; N * 64];
        let stats = run(CorrConfig::rows(dtype, m), &bytes);
        assert_eq!(stats.count(), N as u64);
        let n = BigInt::from(N);
        for i in 0..m {
            assert_eq!(big(stats.sum(i)), &n * max, "{dtype} sum");
            for j in i..m {
                assert_eq!(
                    big(stats.sum_of_products(i, j)),
                    &n * max * max,
                    "{dtype} product"
                );
            }
        }
        // Every stream constant: undefined coefficients.
        assert!(stats.pearson(NanPolicy::Nan).iter().all(|r| r.is_nan()));
        assert!(stats.pearson(NanPolicy::Zero).iter().all(|r| *r == 0.0));
        // Alternate max and 0 on half the streams, max and max-1 on the rest: still exact.
        let w = dtype.width();
        let mut bytes = vec![0u8; N * 64];
        for (t, row) in bytes.chunks_exact_mut(64).enumerate() {
            for (s, item) in row.chunks_exact_mut(w).enumerate() {
                let v = if s % 2 == 0 {
                    if t % 2 == 0 {
                        max
                    } else {
                        0
                    }
                } else if t % 2 == 0 {
                    max
                } else {
                    max - 1
                };
                item.copy_from_slice(&v.to_le_bytes()[..w]);
            }
        }
        let stats = run(CorrConfig::rows(dtype, m), &bytes);
        let half = BigInt::from(N / 2);
        assert_eq!(big(stats.sum(0)), &half * max);
        assert_eq!(big(stats.sum_of_products(0, 1)), &half * max * max);
        assert_eq!(
            big(stats.sum_of_products(1, 1)),
            &half * max * max + &half * (max - 1) * (max - 1)
        );
        assert!(
            stats.pearson(NanPolicy::Nan).iter().all(|r| *r == 1.0),
            "{dtype}: r = 1 everywhere"
        );
    }
}

#[test]
fn sixty_four_bit_extremes_stay_exact() {
    for dtype in [DType::U64, DType::I64] {
        let (lo, hi) = range(dtype);
        let rows: Vec<Vec<i128>> = (0..5000)
            .map(|t| vec![hi, if t % 3 == 0 { lo } else { hi }, lo])
            .collect();
        let stats = run(CorrConfig::rows(dtype, 3), &ints_to_bytes(dtype, &rows));
        assert_stats_exact(&stats, &exact(&rows, 3), &dtype.to_string());
    }
}

#[test]
fn constant_streams_and_derived_measures() {
    // x = t, y = 3t + 7, z = 5 (constant), w = -2t + 100
    let rows: Vec<Vec<i128>> = (0..100)
        .map(|t| vec![t, 3 * t + 7, 5, -2 * t + 100])
        .collect();
    let stats = run(
        CorrConfig::rows(DType::I32, 4),
        &ints_to_bytes(DType::I32, &rows),
    );
    let r = stats.pearson(NanPolicy::Nan);
    assert_eq!(r[stats.pair_index(0, 1)], 1.0);
    assert_eq!(r[stats.pair_index(0, 3)], -1.0);
    assert!(r[stats.pair_index(0, 2)].is_nan());
    assert!(r[stats.pair_index(2, 3)].is_nan());
    assert_eq!(stats.pearson(NanPolicy::Zero)[stats.pair_index(1, 2)], 0.0);
    let reg = stats.regression(0, 1, NanPolicy::Nan);
    assert_eq!((reg.slope, reg.intercept), (3.0, 7.0));
    let reg = stats.regression(0, 3, NanPolicy::Nan);
    assert_eq!((reg.slope, reg.intercept), (-2.0, 100.0));
    let reg = stats.regression(2, 0, NanPolicy::Nan);
    assert!(reg.slope.is_nan() && reg.intercept.is_nan());
    // Through the origin: Sxy / Sxx.
    let sxy: i128 = (0..100).map(|t| t * (3 * t + 7)).sum();
    let sxx: i128 = (0..100).map(|t| t * t).sum();
    assert_eq!(
        stats.regression(0, 1, NanPolicy::Nan).slope_origin,
        sxy as f64 / sxx as f64
    );
    // Cosine: Sxy / sqrt(Sxx Syy).
    let syy: i128 = (0..100).map(|t| (3 * t + 7) * (3 * t + 7)).sum();
    let want = sxy as f64 / ((sxx as f64).sqrt() * (syy as f64).sqrt());
    assert!((stats.cosine_pair(0, 1, NanPolicy::Nan) - want).abs() < 1e-15);
    assert!(
        (stats.cosine_pair(0, 2, NanPolicy::Nan)
            - (0..100).sum::<i128>() as f64 / (sxx as f64).sqrt() / 10.0 / 5.0 * 5.0)
            .abs()
            < 1e-15
    );
    // Means, variances (sample and population), covariance.
    assert_eq!(stats.means(), vec![49.5, 155.5, 5.0, 1.0]);
    let var_t = (0..100).map(|t| (t as f64 - 49.5).powi(2)).sum::<f64>();
    assert_eq!(stats.variances(Ddof::Sample)[0], var_t / 99.0);
    assert_eq!(stats.variances(Ddof::Population)[0], var_t / 100.0);
    assert_eq!(stats.std_devs(Ddof::Sample)[2], 0.0);
    assert_eq!(
        stats.covariance(Ddof::Sample)[stats.pair_index(0, 1)],
        3.0 * var_t / 99.0
    );
    // A float constant stream is also reported as constant, though its statistics are rounded.
    let bytes: Vec<u8> = (0..1000)
        .flat_map(|t| {
            [0.1f64, t as f64 * 0.37]
                .into_iter()
                .flat_map(|v| v.to_le_bytes())
        })
        .collect();
    let stats = run(CorrConfig::rows(DType::F64, 2), &bytes);
    assert!(stats.pearson_pair(0, 1, NanPolicy::Nan).is_nan());
}

#[test]
fn two_streams_and_four_thousand_ninety_six_streams() {
    // M = 2: one coefficient.
    let rows: Vec<Vec<i128>> = (0..10).map(|t| vec![t, t * t]).collect();
    let stats = run(
        CorrConfig::rows(DType::U8, 2),
        &ints_to_bytes(DType::U8, &rows),
    );
    let e = exact(&rows, 2);
    assert_eq!(stats.pearson(NanPolicy::Nan).len(), 1);
    assert!(
        (stats.pearson(NanPolicy::Nan)[0] - exact_pearson(&e, 0, 1).unwrap()).abs()
            < 4.0 * f64::EPSILON
    );
    // M = 4096: 8,386,560 coefficients; check statistics of sampled pairs exactly.
    let m = 4096;
    let n = 40;
    let rows = random_ints(DType::U8, m, n, 14);
    let stats = run(
        CorrConfig::rows(DType::U8, m),
        &ints_to_bytes(DType::U8, &rows),
    );
    let r = stats.pearson(NanPolicy::Nan);
    assert_eq!(r.len(), 8_386_560);
    let mut g = rng(15);
    for _ in 0..300 {
        let i = g.gen_range(0..m - 1);
        let j = g.gen_range(i + 1..m);
        let xs: Vec<i128> = rows.iter().map(|row| row[i]).collect();
        let ys: Vec<i128> = rows.iter().map(|row| row[j]).collect();
        let sub: Vec<Vec<i128>> = xs.iter().zip(&ys).map(|(x, y)| vec![*x, *y]).collect();
        let e = exact(&sub, 2);
        assert_eq!(big(stats.sum_of_products(i, j)), e.products[0][1]);
        assert_eq!(big(stats.sum_of_squares(j)), e.products[1][1]);
        let want = exact_pearson(&e, 0, 1).unwrap_or(f64::NAN);
        assert!(
            close(r[stats.pair_index(i, j)], want, 4.0 * f64::EPSILON),
            "({i},{j})"
        );
    }
}

#[test]
fn spearman_equals_pearson_of_ranks_and_the_closed_form() {
    use inpath_corr::Method;
    let mut r = rng(16);
    // Distinct values: the closed form 1 - 6 sum d^2 / (N (N^2 - 1)) applies.
    let n = 200usize;
    let mut x: Vec<i128> = (0..n as i128).collect();
    let mut y: Vec<i128> = (0..n as i128).map(|v| v * 7 % 1009).collect();
    for k in (1..n).rev() {
        x.swap(k, r.gen_range(0..=k));
        y.swap(k, r.gen_range(0..=k));
    }
    let rows: Vec<Vec<i128>> = x.iter().zip(&y).map(|(a, b)| vec![*a, *b, -*a]).collect();
    let mut config = CorrConfig::rows(DType::I32, 3);
    config.method = Method::Spearman;
    let bytes = ints_to_bytes(DType::I32, &rows);
    let stats = run(config.clone(), &bytes);
    assert_eq!(stats.kind(), inpath_corr::Kind::SpearmanRanks);
    // The ranks are correlated by the engine's kernels, at its level.
    for cap in levels() {
        assert_eq!(run_at(config.clone(), cap, &bytes), stats, "at {cap}");
    }
    let rank = |v: &Vec<i128>| {
        let mut sorted = v.clone();
        sorted.sort();
        v.iter()
            .map(|a| sorted.binary_search(a).unwrap() as i128 + 1)
            .collect::<Vec<_>>()
    };
    let (rx, ry) = (rank(&x), rank(&y));
    let d2: i128 = rx.iter().zip(&ry).map(|(a, b)| (a - b) * (a - b)).sum();
    let nn = n as f64;
    let closed = 1.0 - 6.0 * d2 as f64 / (nn * (nn * nn - 1.0));
    let rho = stats.pearson(NanPolicy::Nan);
    assert!((rho[0] - closed).abs() < 1e-14, "{} vs {closed}", rho[0]);
    assert_eq!(rho[1], -1.0);
    // With ties: Pearson of average ranks, against a brute-force ranking.
    let rows: Vec<Vec<i128>> = (0..300)
        .map(|_| vec![r.gen_range(0..10), r.gen_range(0..4), r.gen_range(-5..5)])
        .collect();
    let bytes = ints_to_bytes(DType::I32, &rows);
    let stats = run(config.clone(), &bytes);
    for cap in levels() {
        assert_eq!(run_at(config.clone(), cap, &bytes), stats, "ties at {cap}");
    }
    let ranks: Vec<Vec<i128>> = {
        let cols: Vec<Vec<i128>> = (0..3)
            .map(|i| rows.iter().map(|row| row[i]).collect())
            .collect();
        let ranked: Vec<Vec<i128>> = cols
            .iter()
            .map(|c| {
                c.iter()
                    .map(|v| {
                        let below = c.iter().filter(|w| *w < v).count() as i128;
                        let equal = c.iter().filter(|w| *w == v).count() as i128;
                        2 * below + equal + 1 // twice the average rank
                    })
                    .collect()
            })
            .collect();
        (0..rows.len())
            .map(|t| (0..3).map(|i| ranked[i][t]).collect())
            .collect()
    };
    let e = exact(&ranks, 3);
    assert_stats_exact(&stats, &e, "spearman ranks");
    // Rank statistics cannot be merged.
    let mut a = stats.clone();
    assert!(matches!(
        a.merge(&stats),
        Err(inpath_core::Error::Incompatible(_))
    ));
}

#[test]
fn statistics_file_round_trips_and_rejects_damage() {
    for dtype in [DType::U32, DType::I64, DType::F64] {
        let m = 5;
        let bytes = if dtype == DType::F64 {
            (0..m * 100)
                .flat_map(|k| ((k as f64).sin()).to_le_bytes())
                .collect()
        } else {
            ints_to_bytes(dtype, &random_ints(dtype, m, 100, 17))
        };
        let mut corr = Corr::new(CorrConfig::rows(dtype, m)).unwrap();
        corr.set_names(vec![
            "a".into(),
            "b".into(),
            "ç".into(),
            "d".into(),
            "e e".into(),
        ])
        .unwrap();
        corr.update(&bytes).unwrap();
        let stats = corr.finish().unwrap();
        let file = stats.to_bytes();
        assert_eq!(&file[..8], b"INPCORR\0");
        let back = inpath_corr::Statistics::from_bytes(&file, "t").unwrap();
        assert_eq!(back, stats);
        // Every single flipped byte is caught (checksum, magic or structure).
        for at in [0, 9, 10, 11, 20, 40, 50, file.len() / 2, file.len() - 1] {
            let mut bad = file.clone();
            bad[at] ^= 0x41;
            assert!(
                inpath_corr::Statistics::from_bytes(&bad, "t").is_err(),
                "{dtype}: flipped byte {at}"
            );
        }
        for len in [0, 10, 43, file.len() - 1] {
            let err = inpath_corr::Statistics::from_bytes(&file[..len], "t").unwrap_err();
            assert!(matches!(err, inpath_core::Error::Corrupt { .. }), "{err}");
        }
        // Merging with itself doubles everything.
        let mut twice = back.clone();
        twice.merge(&stats).unwrap();
        assert_eq!(twice.count(), 200);
        if let (Stat::Int(a), Stat::Int(b)) =
            (twice.sum_of_products(1, 3), stats.sum_of_products(1, 3))
        {
            assert_eq!(big(Stat::Int(a)), big(Stat::Int(b)) * 2);
        }
    }
}

#[test]
fn newer_format_versions_are_refused_with_a_clear_error() {
    let stats = run(CorrConfig::rows(DType::U8, 2), &[1, 2, 3, 4]);
    let mut file = stats.to_bytes();
    file[8] = 2;
    let len = file.len();
    let crc = crc(&file[..len - 4]);
    file[len - 4..].copy_from_slice(&crc.to_le_bytes());
    let err = inpath_corr::Statistics::from_bytes(&file, "x.stats")
        .unwrap_err()
        .to_string();
    assert!(err.contains("format version 2 is not supported"), "{err}");
}

fn crc(bytes: &[u8]) -> u32 {
    // CRC-32 (IEEE), bitwise: independent of the crate's crc32fast.
    let mut crc = 0xffff_ffffu32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// The level decides the kernels, at every cap (`Corr::with_isa_cap`, lowest of the CPU's,
/// `INPATH_ISA`'s and the cap): on x86-64 with AVX2 the portable `f64` tiles never run unless
/// asked for, and an engine capped at AVX2 on an AVX-512 machine runs exactly the AVX2 kernels
/// (as `INPATH_ISA=avx2` does for all of them). Lanes and resets keep the cap.
#[test]
fn kernel_names_follow_the_isa_level() {
    use inpath_core::isa::{self, Level};
    let all = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F32,
        DType::F64,
    ];
    for cap in Level::ALL {
        let name = |dtype, m, kernel: Kernel| {
            let at = kernel.name_at(cap, dtype, m);
            let corr = Corr::with_isa_cap(config(dtype, m, kernel), cap).unwrap();
            assert_eq!(corr.kernel_name(), at, "{dtype} M={m} {kernel:?} at {cap}");
            if cap == Level::Avx512 {
                // The top: what `Corr::new` and `Kernel::name_for` run.
                let corr = Corr::new(config(dtype, m, kernel)).unwrap();
                assert_eq!(corr.kernel_name(), at, "{dtype} M={m} {kernel:?}");
                assert_eq!(kernel.name_for(dtype, m), at, "{dtype} M={m} {kernel:?}");
            }
            at
        };
        for dtype in all {
            for m in [2, 16, 64, 300] {
                let label = format!("{dtype} M={m} at {cap}");
                assert_eq!(name(dtype, m, Kernel::Portable), "portable-f64", "{label}");
                let auto = name(dtype, m, Kernel::Auto);
                let no_amx = name(dtype, m, Kernel::NoAmx);
                let tiles = name(dtype, m, Kernel::Tiles);
                assert_ne!(no_amx, "amx-int8", "{label}");
                match cap.min(isa::effective()) {
                    Level::Portable => {
                        assert_eq!(auto, "portable-f64", "{label}");
                        assert_eq!(no_amx, "portable-f64", "{label}");
                        assert_eq!(tiles, "portable-f64", "{label}");
                    }
                    Level::Avx2 => {
                        let want = match dtype {
                            DType::U8 | DType::I8 => "avx2-i8",
                            DType::U16 | DType::I16 | DType::U32 | DType::I32 => "avx2-i16",
                            _ => "avx2-f64",
                        };
                        assert_eq!(auto, want, "{label}");
                        assert_eq!(no_amx, want, "{label}");
                        assert_eq!(tiles, "avx2-f64", "{label}");
                    }
                    Level::Avx512 => {
                        assert_ne!(auto, "portable-f64", "{label}");
                        assert!(!auto.starts_with("avx2-") || auto == "avx2-i8", "{auto}");
                        assert_eq!(tiles, "avx512-f64", "{label}");
                    }
                }
            }
        }
    }
    // Lanes (forks) and the engine after `finish` keep the cap.
    for cap in levels() {
        let want = Kernel::Auto.name_at(cap, DType::U16, 16);
        let mut corr = Corr::with_isa_cap(config(DType::U16, 16, Kernel::Auto), cap).unwrap();
        assert_eq!(corr.fork().kernel_name(), want, "a lane at {cap}");
        corr.update(&[7u8; 32 * 3]).unwrap();
        assert_eq!(corr.finish().unwrap().count(), 3);
        assert_eq!(corr.kernel_name(), want, "after finish at {cap}");
    }
}

/// Runs every kernel of every level this CPU runs (`Auto`, `NoAmx` and `Tiles` capped at each
/// level; each distinct kernel once) and asserts each gives the portable kernels' statistics
/// bit for bit; returns them.
fn all_kernels(dtype: DType, m: usize, bytes: &[u8], label: &str) -> Statistics {
    let portable = run(config(dtype, m, Kernel::Portable), bytes);
    let kernels = [Kernel::Auto, Kernel::NoAmx, Kernel::Tiles];
    for KernelRun { cap, kernel, name } in kernel_runs(dtype, m, &kernels, &["portable-f64"]) {
        let got = run_at(config(dtype, m, kernel), cap, bytes);
        assert!(
            got == portable,
            "{label}: {kernel:?} at {cap} ({name}) differs from portable-f64"
        );
    }
    portable
}

/// Every kernel level this CPU runs (AVX-512, AVX2, portable; capped by `INPATH_ISA`), all in
/// this process, gives identical statistics for every type (bit for bit, float types
/// included): stream counts 2..=70 (every lane group and register tile boundary of the 8-lane
/// AVX2 kernels), random row counts and random chunkings.
#[test]
fn every_level_gives_identical_statistics_for_every_type() {
    let mut r = rng(31);
    let types = [
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::U32,
        DType::I32,
        DType::U64,
        DType::I64,
        DType::F32,
        DType::F64,
    ];
    for (k, dtype) in types.into_iter().enumerate() {
        for m in 2..=70 {
            let n = [1, 2, 3, 5, 31, 33, 64, 65, 129, 257, 300][(m + k) % 11];
            let bytes = if dtype.is_float() {
                let mut b = Vec::new();
                for _ in 0..n * m {
                    let v: f64 = r.gen_range(-1e6..1e6) * r.gen::<f64>();
                    if dtype == DType::F32 {
                        b.extend_from_slice(&(v as f32).to_le_bytes());
                    } else {
                        b.extend_from_slice(&v.to_le_bytes());
                    }
                }
                b
            } else {
                ints_to_bytes(dtype, &random_ints(dtype, m, n, (k * 100 + m) as u64))
            };
            let label = format!("{dtype} M={m} N={n}");
            let portable = all_kernels(dtype, m, &bytes, &label);
            // Random chunks (partial rows, partial duos and quads) on each level's fastest
            // kernels.
            for KernelRun { cap, kernel, name } in kernel_runs(dtype, m, &[Kernel::Auto], &[]) {
                let got = run_chunked(config(dtype, m, kernel), cap, &bytes, &mut r).unwrap();
                assert!(got == portable, "{label}: uneven chunks at {cap} ({name})");
            }
        }
    }
}

/// The 8-bit integer kernels' 32-bit lanes at their widening limits (32,768 rows for AVX2
/// `vpmaddwd`, 65,536 for VNNI): all-extreme rows, the largest products, around the limits.
#[test]
fn eight_bit_kernels_widen_before_their_lanes_overflow() {
    for dtype in [DType::U8, DType::I8] {
        let (lo, hi) = range(dtype);
        for m in [3, 9, 17] {
            for n in [32_767, 32_768, 32_769, 65_537] {
                let rows: Vec<Vec<i128>> = (0..n)
                    .map(|t| {
                        (0..m)
                            .map(|s| if (t + s) % 97 == 0 { lo } else { hi })
                            .collect()
                    })
                    .collect();
                let bytes = ints_to_bytes(dtype, &rows);
                let label = format!("{dtype} M={m} N={n} extremes");
                let stats = all_kernels(dtype, m, &bytes, &label);
                assert_stats_exact(&stats, &exact(&rows, m), &label);
            }
        }
    }
}

/// Wide rows (256 lanes or more) go through group-major panel copies on the AVX2 and portable
/// levels: the statistics still equal the big-integer sums, for every integer type.
#[test]
fn wide_rows_through_group_major_panels_stay_exact() {
    for (k, dtype) in INT_TYPES.into_iter().enumerate() {
        let (m, n) = (260, [3, 40, 65, 300][k % 4]);
        let rows = random_ints(dtype, m, n, 500 + k as u64);
        let bytes = ints_to_bytes(dtype, &rows);
        let label = format!("{dtype} M={m} N={n}");
        let stats = all_kernels(dtype, m, &bytes, &label);
        assert_stats_exact(&stats, &exact(&rows, m), &label);
    }
}

/// The AVX2 `vpmaddwd` kernel for 16 and 32-bit items (`avx2-i16`, run on AVX-512 CPUs too by
/// capping the engine at AVX2) at its limits, against the big-integer sums: all-maximum rows (every digit -32768, so every panel takes the biased
/// "safe" tiles), all-minimum and all-zero rows, maxima alternating with minima, random rows
/// salted with extremes (panels of both kinds in one run), stream counts around the 8-lane
/// groups and row counts around the duos, the panels and the 65,536-row widening.
#[test]
fn sixteen_and_thirty_two_bit_digit_kernels_stay_exact_at_extremes() {
    let mut r = rng(77);
    for dtype in [DType::U16, DType::I16, DType::U32, DType::I32] {
        let (lo, hi) = range(dtype);
        let cases: &[(usize, &[usize])] = &[
            (2, &[1, 2, 3, 255, 257, 65_535, 65_536, 65_537, 131_075]),
            (3, &[4_097]),
            (8, &[513]),
            (9, &[1_023]),
            (16, &[2_049, 65_539]),
            (17, &[77]),
        ];
        for &(m, ns) in cases {
            for &n in ns {
                for pattern in 0..5 {
                    let rows: Vec<Vec<i128>> = (0..n)
                        .map(|t| {
                            (0..m)
                                .map(|s| match pattern {
                                    0 => hi,
                                    1 => lo,
                                    2 => 0,
                                    3 => {
                                        if (t + s) % 2 == 0 {
                                            hi
                                        } else {
                                            lo
                                        }
                                    }
                                    _ => match r.gen_range(0..8) {
                                        0 => hi,
                                        1 => lo,
                                        2 => hi - 1,
                                        3 => lo + 1,
                                        4 => 0,
                                        _ => r.gen_range(lo..=hi),
                                    },
                                })
                                .collect()
                        })
                        .collect();
                    let bytes = ints_to_bytes(dtype, &rows);
                    let label = format!("{dtype} M={m} N={n} pattern {pattern}");
                    let stats = all_kernels(dtype, m, &bytes, &label);
                    assert_stats_exact(&stats, &exact(&rows, m), &label);
                }
            }
        }
    }
}
