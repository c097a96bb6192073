//! A test engine shared by the lane and input-path tests: the multiset of records as (count,
//! sum of bytes, sum of FNV hashes), which any split, lane count or input path must preserve.
#![allow(dead_code)]

use inpath_core::{Deframer, Engine, Framing, Lane, RecordSink, Result};
use rand::Rng;

/// A mergeable engine: the multiset of records as (sum of bytes, count, xor of FNV hashes).
#[derive(Debug)]
pub struct Digest {
    deframer: Deframer,
    state: State,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct State {
    pub records: u64,
    pub byte_sum: u64,
    pub hash_sum: u64,
}

impl RecordSink for State {
    fn fixed(&mut self, records: &[u8]) -> Result<()> {
        for record in records.chunks(4) {
            self.value(0, record)?;
        }
        Ok(())
    }
    fn value(&mut self, _column: usize, value: &[u8]) -> Result<()> {
        self.records += 1;
        self.byte_sum += value.iter().map(|&b| b as u64).sum::<u64>();
        let fnv = value.iter().fold(0xcbf29ce484222325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100000001b3)
        });
        self.hash_sum = self.hash_sum.wrapping_add(fnv);
        Ok(())
    }
}

impl Digest {
    pub fn new(framing: Framing) -> Self {
        Digest {
            deframer: Deframer::new(framing).unwrap(),
            state: State::default(),
        }
    }
}

impl Engine for Digest {
    type Output = State;
    fn update(&mut self, chunk: &[u8]) -> Result<()> {
        self.deframer.feed(chunk, &mut self.state)
    }
    fn finish(&mut self) -> Result<State> {
        self.close_input()?;
        Ok(std::mem::take(&mut self.state))
    }
}

impl Lane for Digest {
    fn framing(&self) -> &Framing {
        self.deframer.framing()
    }
    fn fork(&self) -> Self {
        Digest::new(self.deframer.framing().clone())
    }
    fn close_input(&mut self) -> Result<()> {
        self.deframer.close(&mut self.state)
    }
    fn merge(&mut self, other: &Self) -> Result<()> {
        self.state.records += other.state.records;
        self.state.byte_sum += other.state.byte_sum;
        self.state.hash_sum = self.state.hash_sum.wrapping_add(other.state.hash_sum);
        Ok(())
    }
}

pub fn text(rng: &mut impl Rng, lines: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..lines {
        let len = rng.gen_range(0..40);
        out.extend((0..len).map(|_| rng.gen_range(b'a'..=b'z')));
        out.push(b'\n');
    }
    out.extend_from_slice(b"unterminated");
    out
}
