//! Content-defined chunking (FastCDC), so an edit in the middle of a large file
//! changes only the chunks around it.

use fastcdc::v2020::StreamCDC;
use std::io::Read;

/// 16/64/256 KiB: small enough that a 1 MiB edit costs ~1.1 MiB, large enough
/// that a 512 MiB file's chunk list (one tree entry) stays under ~0.5 MB.
pub const MIN_SIZE: usize = 16 * 1024;
pub const AVG_SIZE: usize = 64 * 1024;
pub const MAX_SIZE: usize = crate::limits::to_usize(crate::limits::MAX_CHUNK);

/// A file's chunks, in order.
pub type Chunks<'a> = Box<dyn Iterator<Item = std::io::Result<Vec<u8>>> + 'a>;

/// Splits the first `len` bytes of a stream (fewer if it ends first) into
/// chunks; memory use is bounded by `MAX_SIZE`. `seed` keys the gear table
/// (`Codec::chunker_seed`; 0 is the published one, format 1's).
pub fn chunks<'a, R: Read + 'a>(source: R, len: u64, seed: u64) -> Chunks<'a> {
    let mut source = source.take(len);
    if len < MIN_SIZE as u64 {
        // One chunk at most: read it into a buffer of its size, not into
        // the chunker's `MAX_SIZE` one (most files of a dataset are small).
        let mut buf = Vec::with_capacity(crate::limits::to_usize(len));
        let read = source.read_to_end(&mut buf).map(|_| buf);
        return Box::new(std::iter::once(read).filter(|r| !matches!(r, Ok(b) if b.is_empty())));
    }
    Box::new(
        StreamCDC::with_level_and_seed(
            source,
            MIN_SIZE,
            AVG_SIZE,
            MAX_SIZE,
            fastcdc::v2020::Normalization::Level1,
            seed,
        )
        .map(|r| {
            r.map(|c| c.data).map_err(|e| match e {
                fastcdc::v2020::Error::IoError(io) => io,
                other => std::io::Error::other(other.to_string()),
            })
        }),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::id::BlobId;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// Bytes that look random (xorshift), the same for the same seed.
    pub(crate) fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect()
    }

    fn ids(data: &[u8]) -> Vec<BlobId> {
        chunks(data, u64::MAX, 0)
            .map(|c| BlobId::of(&c.unwrap()))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        #[test]
        fn chunks_concatenate_to_input(len in 0usize..1_500_000, seed in any::<u64>()) {
            let data = pseudo_random(len, seed);
            let parts: Vec<Vec<u8>> = chunks(&data[..], u64::MAX, 0).map(|c| c.unwrap()).collect();
            for (i, p) in parts.iter().enumerate() {
                prop_assert!(p.len() <= MAX_SIZE);
                prop_assert!(i + 1 == parts.len() || p.len() >= MIN_SIZE);
            }
            prop_assert_eq!(parts.concat(), data);
        }
    }

    #[test]
    fn a_prefix_chunks_as_the_stream_of_its_bytes() {
        let data = pseudo_random(4 * MIN_SIZE, 7);
        for len in [
            0,
            1,
            100,
            MIN_SIZE - 1,
            MIN_SIZE,
            MIN_SIZE + 1,
            3 * MIN_SIZE,
        ] {
            let prefix: Vec<Vec<u8>> = chunks(&data[..], len as u64, 0)
                .map(|c| c.unwrap())
                .collect();
            let whole: Vec<Vec<u8>> = chunks(&data[..len], u64::MAX, 0)
                .map(|c| c.unwrap())
                .collect();
            assert_eq!(prefix, whole, "{len}");
        }
        // A stream shorter than the prefix it is asked for ends the chunks.
        assert_eq!(
            chunks(&data[..10], 100, 0)
                .map(|c| c.unwrap())
                .collect::<Vec<_>>(),
            vec![data[..10].to_vec()]
        );
    }

    #[test]
    fn middle_edit_changes_only_nearby_chunks() {
        let mut data = pseudo_random(8 << 20, 42);
        let before: HashSet<_> = ids(&data).into_iter().collect();
        let mid = data.len() / 2;
        data[mid..mid + (1 << 20)].fill(0xAB);
        let after = ids(&data);
        let new_bytes: usize = chunks(&data[..], u64::MAX, 0)
            .map(|c| c.unwrap())
            .filter(|c| !before.contains(&BlobId::of(c)))
            .map(|c| c.len())
            .sum();
        assert!(after.len() > 64);
        // 1 MiB changed; at most a couple of max-size chunks around it are new.
        assert!(new_bytes <= (1 << 20) + 2 * MAX_SIZE, "{new_bytes}");
    }

    #[test]
    fn a_keyed_chunker_cuts_elsewhere() {
        let data = pseudo_random(4 << 20, 9);
        let cuts = |seed| -> Vec<usize> {
            chunks(&data[..], u64::MAX, seed)
                .map(|c| c.unwrap().len())
                .collect()
        };
        assert_ne!(cuts(0), cuts(0x5eed_1234_abcd_ef01));
        assert_eq!(
            cuts(0x5eed_1234_abcd_ef01).iter().sum::<usize>(),
            data.len()
        );
    }
}
