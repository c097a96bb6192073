//! The one place inpath-table picks its kernels for the running CPU (`INPATH_ISA` and the CPU's
//! level, through [`inpath_core::kernel!`]): the check of a dictionary page's codes.

#![allow(unsafe_code)]

use crate::error::{malformed, Malformed};
use inpath_core::kernel;

kernel! {
    /// Whether every code lies in `0..len` (a dictionary page's codes against its values).
    codes_within(codes: &[i32], len: usize) -> bool {
        // Unsigned, a negative code is beyond any length: the largest code against the
        // length (a max reduction vectorises; an AND of compares did not).
        let len = len.min(u32::MAX as usize) as u32;
        codes.is_empty() || codes.iter().fold(0u32, |m, &c| m.max(c as u32)) < len
    }
}

/// A dictionary array of `keys` over `values`, its codes checked by [`codes_within`] (Arrow's
/// own check, a branch a code, showed in Q1's profile on the device); Arrow's checked constructor
/// where the keys have nulls.
pub(crate) fn dictionary_array(
    keys: arrow_array::Int32Array,
    values: arrow_array::ArrayRef,
) -> Result<arrow_array::DictionaryArray<arrow_array::types::Int32Type>, Malformed> {
    use arrow_array::Array;
    if keys.null_count() == 0 {
        if !codes_within::run(keys.values(), values.len()) {
            return Err(malformed!(
                "a dictionary code is outside the dictionary's {} values",
                values.len()
            ));
        }
        // SAFETY: every key is non-null and in 0..values.len(), what `try_new` checks.
        return Ok(unsafe { arrow_array::DictionaryArray::new_unchecked(keys, values) });
    }
    arrow_array::DictionaryArray::try_new(keys, values).map_err(|e| Malformed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use inpath_core::isa;

    /// Every level finds exactly the codes outside the dictionary.
    #[test]
    fn codes_within_at_every_level() {
        for n in [0usize, 1, 63, 64, 65, 1000, 4096] {
            let codes: Vec<i32> = crate::testing::xorshift(3 + n as u64, n, 0, 5000)
                .iter()
                .map(|&x| x as i32)
                .collect();
            for level in isa::supported() {
                let top = codes.iter().copied().max().unwrap_or(-1);
                assert!(
                    codes_within::at(level, &codes, (top + 1) as usize),
                    "{level}"
                );
                if n > 0 {
                    assert!(!codes_within::at(level, &codes, top as usize), "{level}");
                    let mut negative = codes.clone();
                    negative[n / 2] = -1;
                    assert!(!codes_within::at(level, &negative, 1 << 20), "{level}");
                }
            }
        }
    }

    #[test]
    fn dictionary_arrays_check_their_codes() {
        use arrow_array::{Array, Int32Array, StringArray};
        let values: arrow_array::ArrayRef = std::sync::Arc::new(StringArray::from(vec!["a", "b"]));
        let ok = dictionary_array(Int32Array::from(vec![0, 1, 1]), values.clone()).unwrap();
        assert_eq!(ok.len(), 3);
        assert!(dictionary_array(Int32Array::from(vec![0, 2]), values.clone()).is_err());
        assert!(dictionary_array(Int32Array::from(vec![-1]), values.clone()).is_err());
        let with_null = Int32Array::from(vec![Some(1), None]);
        assert_eq!(dictionary_array(with_null, values).unwrap().null_count(), 1);
    }
}
