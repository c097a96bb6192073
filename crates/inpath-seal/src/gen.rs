//! Generated page contents for demos, tests and benchmarks: text shaped like TPC-H `lineitem`
//! rows (`|`-separated keys, prices, dates, flags and a comment), and random bytes. Fixed
//! seeds give the same bytes on every machine.

/// A small, fast deterministic generator (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

const WORDS: [&str; 24] = [
    "furiously",
    "carefully",
    "blithely",
    "quickly",
    "slyly",
    "fluffily",
    "ironic",
    "regular",
    "final",
    "express",
    "pending",
    "special",
    "bold",
    "even",
    "deposits",
    "requests",
    "accounts",
    "packages",
    "theodolites",
    "pinto",
    "beans",
    "foxes",
    "instructions",
    "asymptotes",
];
const INSTRUCT: [&str; 4] = [
    "DELIVER IN PERSON",
    "COLLECT COD",
    "NONE",
    "TAKE BACK RETURN",
];
const MODES: [&str; 7] = ["TRUCK", "MAIL", "REG AIR", "AIR", "FOB", "RAIL", "SHIP"];

/// `len` bytes of `lineitem`-like text (rows cut at the end to fit exactly).
pub fn lineitem_text(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 256);
    let mut order = 1 + rng.below(1000);
    while out.len() < len {
        let lines = 1 + rng.below(7);
        for line in 1..=lines {
            let qty = 1 + rng.below(50);
            let price = qty * (90_000 + rng.below(110_000)) / 100;
            let ship = 1 + rng.below(2500);
            let date = |d: u64| {
                let d = d.min(2556);
                format!(
                    "{}-{:02}-{:02}",
                    1992 + d / 365,
                    1 + (d % 365) / 31 % 12,
                    1 + d % 28
                )
            };
            let mut comment = String::new();
            for _ in 0..2 + rng.below(5) {
                if !comment.is_empty() {
                    comment.push(' ');
                }
                comment.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
            }
            let row = format!(
                "{order}|{}|{}|{line}|{qty}|{}.{:02}|0.{:02}|0.0{}|{}|{}|{}|{}|{}|{}|{}|{comment}|\n",
                1 + rng.below(200_000),
                1 + rng.below(10_000),
                price,
                rng.below(100),
                rng.below(11),
                rng.below(9),
                ["N", "R", "A"][rng.below(3) as usize],
                ["O", "F"][rng.below(2) as usize],
                date(ship),
                date(ship + rng.below(60)),
                date(ship + rng.below(30)),
                INSTRUCT[rng.below(4) as usize],
                MODES[rng.below(7) as usize],
            );
            out.extend_from_slice(row.as_bytes());
        }
        order += 1 + rng.below(4);
    }
    out.truncate(len);
    out
}

/// `len` random bytes.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}
