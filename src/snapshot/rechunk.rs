//! Cutting a changed file again where its previous version was cut.
//!
//! FastCDC decides a chunk's end from the chunk's own bytes and the one
//! byte after it (it looks no further), unless the file ended there or the
//! chunk is as long as a chunk can be. So where the bytes of a previous
//! chunk, and the byte after them, are found again where the chunker
//! starts a chunk, it would cut them as before. A [`Rechunker`] guesses
//! the previous chunks in turn (one read each, no boundary search); the
//! caller checks each guess by its id, which it computes anyway, with
//! [`Checks`]: a right guess is kept once the next guess is right too (its
//! first byte is the byte after), and a wrong one is reported
//! ([`Rechunker::wrong_guess`]): from there the chunker cuts, and guessing
//! resumes where one of its cuts meets a previous chunk's start (at the same
//! offset, or moved by the change of the file's size: an insertion or a
//! deletion before it). The chunks are those `chunker::chunks` gives for the
//! whole file, byte for byte (tests below).

use super::chunker::{self, Chunks};
use crate::id::BlobId;
use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

/// The next chunk: a guess to check against `id`, or a cut.
pub enum Piece {
    Guess {
        start: u64,
        data: Vec<u8>,
        id: BlobId,
    },
    Cut {
        start: u64,
        data: Vec<u8>,
    },
}

impl Piece {
    /// Where it starts, its bytes, and the id it must have if a guess.
    pub fn into_parts(self) -> (u64, Vec<u8>, Option<BlobId>) {
        match self {
            Piece::Guess { start, data, id } => (start, data, Some(id)),
            Piece::Cut { start, data } => (start, data, None),
        }
    }
}

/// The caller's side: pieces hashed in the order they were given out. A
/// right guess is kept once the byte after it is known unchanged: the next
/// piece is a right guess too, or the file ends after it, or it is as long
/// as a chunk can be (cut by size alone). Otherwise the chunker cuts again
/// from it.
#[derive(Default)]
pub struct Checks {
    /// Pieces given out and not yet hashed: where they start, and the id a
    /// guess must have.
    due: std::collections::VecDeque<(u64, Option<BlobId>)>,
    /// A right guess waiting for the piece after it.
    held: Option<(u64, Chunk)>,
}

/// A chunk known right: its id, its bytes, and whether it was a guess.
pub type Chunk = (BlobId, Vec<u8>, bool);

impl Checks {
    /// A piece given out to be hashed.
    pub fn given(&mut self, start: u64, want: Option<BlobId>) {
        self.due.push_back((start, want));
    }

    /// Whether every piece given out was hashed.
    pub fn all_hashed(&self) -> bool {
        self.due.is_empty()
    }

    /// The next piece given out, hashed to `id`, of a file of `len` bytes:
    /// the chunks now known right, in order; or where the chunker must cut
    /// again from (`Rechunker::wrong_guess`; pieces given out since are
    /// void and forgotten here).
    pub fn hashed(&mut self, id: BlobId, data: Vec<u8>, len: u64) -> Result<Vec<Chunk>, u64> {
        let (start, want) = self.due.pop_front().expect("one check per piece");
        let wrong = want.is_some_and(|w| w != id);
        // A cut after a held guess: whether the byte after it changed is
        // not known.
        if wrong || (want.is_none() && self.held.is_some()) {
            self.due.clear();
            return Err(self.held.take().map_or(start, |(at, _)| at));
        }
        let mut keep: Vec<Chunk> = self.held.take().map(|(_, c)| c).into_iter().collect();
        let end = start + data.len() as u64;
        let guess = want.is_some();
        if guess && data.len() < chunker::MAX_SIZE && end < len {
            self.held = Some((start, (id, data, guess)));
        } else {
            keep.push((id, data, guess));
        }
        Ok(keep)
    }

    /// The pieces ended: a guess still held (only where the file changed
    /// while it was read, which the caller finds and reads it again for).
    pub fn finish(&mut self) -> Option<Chunk> {
        self.held.take().map(|(_, c)| c)
    }
}

enum Next<'a> {
    /// Previous chunk `k`, at `pos`.
    Guess(usize),
    /// The chunker, from `pos` on (made at the first piece it gives).
    Cut(Option<Chunks<'a>>),
}

pub struct Rechunker<'a> {
    file: &'a File,
    /// The file's size now, and before.
    len: u64,
    old_len: u64,
    /// Previous chunks: start, size, id; and their index by start.
    old: Vec<(u64, u64, BlobId)>,
    by_start: HashMap<u64, usize>,
    seed: u64,
    /// Where the next piece starts.
    pos: u64,
    next: Next<'a>,
}

impl<'a> Rechunker<'a> {
    /// `len` bytes of `file`, previously cut into `previous` (sizes and ids
    /// in order) by the chunker of `seed`.
    pub fn new(
        file: &'a File,
        len: u64,
        previous: impl IntoIterator<Item = (u64, BlobId)>,
        seed: u64,
    ) -> Rechunker<'a> {
        let mut old = Vec::new();
        let mut at = 0;
        for (size, id) in previous {
            old.push((at, size, id));
            at += size;
        }
        let by_start = old.iter().enumerate().map(|(k, c)| (c.0, k)).collect();
        Rechunker {
            file,
            len,
            old_len: at,
            old,
            by_start,
            seed,
            pos: 0,
            next: Next::Guess(0),
        }
    }

    /// The guess starting at `start` was wrong: the chunker cuts from there
    /// on. Pieces given after it are void.
    pub fn wrong_guess(&mut self, start: u64) {
        self.pos = start;
        self.next = Next::Cut(None);
    }

    /// Whether previous chunk `k` may be guessed at `pos`: one that ended
    /// the previous file ended there because the file did, so only where
    /// this one ends at the same place.
    fn may_guess(&self, k: usize) -> bool {
        let Some(&(start, size, _)) = self.old.get(k) else {
            return false;
        };
        // Sizes come from the local index: only what the chunker can cut.
        if size == 0 || size > chunker::MAX_SIZE as u64 {
            return false;
        }
        let end = self.pos + size;
        end <= self.len && (start + size < self.old_len || end == self.len)
    }

    /// The previous chunk starting at `at`, in place or moved by the
    /// change of size.
    fn resumes_at(&self, at: u64) -> Option<usize> {
        let moved = (at as i128 - (self.len as i128 - self.old_len as i128)).try_into();
        self.by_start
            .get(&at)
            .or_else(|| self.by_start.get(&moved.ok()?))
            .copied()
    }

    fn guess(&mut self, k: usize) -> io::Result<Piece> {
        let (_, size, id) = self.old[k];
        let mut data = vec![0; crate::limits::to_usize(size)];
        self.file.read_exact_at(&mut data, self.pos)?;
        let start = self.pos;
        self.pos += size;
        self.next = Next::Guess(k + 1);
        Ok(Piece::Guess { start, data, id })
    }
}

impl Iterator for Rechunker<'_> {
    type Item = io::Result<Piece>;

    fn next(&mut self) -> Option<io::Result<Piece>> {
        if self.pos >= self.len {
            return None;
        }
        if let Next::Guess(k) = self.next {
            if self.may_guess(k) {
                match self.guess(k) {
                    // Shorter than its size said: cut what there is (the
                    // caller sees the size change).
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
                    other => return Some(other),
                }
            }
            self.next = Next::Cut(None);
        }
        let Next::Cut(chunks) = &mut self.next else {
            unreachable!("guesses are handed out above");
        };
        let from = FromOffset {
            file: self.file,
            at: self.pos,
        };
        let chunks =
            chunks.get_or_insert_with(|| chunker::chunks(from, self.len - self.pos, self.seed));
        let data = match chunks.next()? {
            Ok(data) => data,
            Err(e) => return Some(Err(e)),
        };
        let start = self.pos;
        self.pos += data.len() as u64;
        if self.pos < self.len
            && let Some(k) = self.resumes_at(self.pos)
        {
            self.next = Next::Guess(k);
        }
        Some(Ok(Piece::Cut { start, data }))
    }
}

/// A file read from an offset on, by positioned reads.
struct FromOffset<'a> {
    file: &'a File,
    at: u64,
}

impl Read for FromOffset<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::chunker::tests::pseudo_random as noise;
    use proptest::prelude::*;

    fn id(data: &[u8]) -> BlobId {
        BlobId::of(data)
    }

    fn cut_whole(data: &[u8], seed: u64) -> Vec<Vec<u8>> {
        chunker::chunks(data, data.len() as u64, seed)
            .map(Result::unwrap)
            .collect()
    }

    /// What a commit does with the pieces: hashes them (here at once, or
    /// `lag` pieces late, as its hashing threads do) and checks them;
    /// returns the chunks kept and how many were guesses.
    fn rechunk(old: &[u8], new: &[u8], seed: u64, lag: usize) -> (Vec<Vec<u8>>, usize) {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, new).unwrap();
        let previous = cut_whole(old, seed)
            .into_iter()
            .map(|c| (c.len() as u64, id(&c)));
        let len = new.len() as u64;
        let mut r = Rechunker::new(&f, len, previous, seed);
        let mut checks = Checks::default();
        let (mut kept, mut guessed) = (Vec::new(), 0);
        let mut hashing = std::collections::VecDeque::new();
        loop {
            let exhausted = match r.next() {
                Some(p) => {
                    let (start, data, want) = p.unwrap().into_parts();
                    checks.given(start, want);
                    hashing.push_back(data);
                    false
                }
                None => true,
            };
            if exhausted && checks.all_hashed() {
                break;
            }
            while hashing.len() > lag || (exhausted && !hashing.is_empty()) {
                let data = hashing.pop_front().unwrap();
                match checks.hashed(id(&data), data, len) {
                    Ok(keep) => {
                        for (_, data, guess) in keep {
                            guessed += usize::from(guess);
                            kept.push(data);
                        }
                    }
                    Err(at) => {
                        hashing.clear();
                        r.wrong_guess(at);
                        break;
                    }
                }
            }
        }
        kept.extend(checks.finish().map(|c| c.1));
        (kept, guessed)
    }

    fn sizes(chunks: &[Vec<u8>]) -> Vec<usize> {
        chunks.iter().map(Vec::len).collect()
    }

    #[test]
    fn an_edit_in_the_middle_is_cut_again_and_the_rest_guessed() {
        let old = noise(3 << 20, 1);
        let mut new = old.clone();
        new[1 << 20..(1 << 20) + 1000].copy_from_slice(&noise(1000, 2));
        for lag in [0, 8] {
            let (kept, right) = rechunk(&old, &new, 0, lag);
            assert_eq!(kept, cut_whole(&new, 0), "lag {lag}");
            // All but the chunks around the edit are guessed.
            assert!(right + 4 >= kept.len(), "{right} of {}", kept.len());
        }
    }

    #[test]
    fn an_insertion_moves_the_guesses_after_it() {
        let old = noise(2 << 20, 3);
        let mut new = old.clone();
        new.splice(100_000..100_000, noise(5000, 4));
        let (kept, right) = rechunk(&old, &new, 7, 8);
        assert_eq!(kept, cut_whole(&new, 7));
        assert!(right + 4 >= kept.len(), "{right} of {}", kept.len());
    }

    #[test]
    fn an_edit_starting_right_after_a_chunk_moves_its_cut_if_the_chunker_would() {
        // FastCDC's cut after a chunk also weighs the next byte: a changed
        // first byte of a chunk may undo the cut before it.
        let old = noise(2 << 20, 11);
        let cuts: Vec<usize> = cut_whole(&old, 0)
            .iter()
            .scan(0, |at, c| {
                *at += c.len();
                Some(*at)
            })
            .collect();
        let mut found = 0;
        for &b in &cuts[..cuts.len() - 1] {
            for v in 0..=255u8 {
                let mut new = old.clone();
                new[b] = v;
                let whole = cut_whole(&new, 0);
                let mut at = 0;
                let cut_at_b = whole.iter().any(|c| {
                    at += c.len();
                    at == b
                });
                if cut_at_b {
                    continue;
                }
                found += 1;
                for lag in [0, 3] {
                    let (kept, _) = rechunk(&old, &new, 0, lag);
                    assert_eq!(sizes(&kept), sizes(&whole), "byte {b} = {v}");
                    assert!(kept == whole, "byte {b} = {v}");
                }
                break;
            }
        }
        assert!(found > 5, "edits that undo a cut: {found}");
    }

    #[test]
    fn sizes_no_chunker_cuts_are_not_guessed() {
        let data = noise(1 << 20, 8);
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &data).unwrap();
        let previous = [(0, id(b"")), (1 << 40, id(b"")), (1 << 20, id(&data))];
        let r = Rechunker::new(&f, data.len() as u64, previous, 0);
        let kept: Vec<Vec<u8>> = r.map(|p| p.unwrap().into_parts().1).collect();
        assert_eq!(kept, cut_whole(&data, 0));
    }

    #[test]
    fn the_last_chunk_is_guessed_only_where_the_file_still_ends() {
        let old = noise(1 << 20, 5);
        let mut new = old.clone();
        new.extend_from_slice(&noise(10, 6));
        let (kept, _) = rechunk(&old, &new, 0, 0);
        assert_eq!(kept, cut_whole(&new, 0));
        let (kept, right) = rechunk(&old, &old, 0, 0);
        assert_eq!((kept.len(), right), (cut_whole(&old, 0).len(), kept.len()));
    }

    /// An edit: bytes overwritten, inserted or removed at a place, or the
    /// end cut off or added to.
    fn edited(old: &[u8], kind: u8, at: usize, n: usize, seed: u64) -> Vec<u8> {
        let at = at % (old.len() + 1);
        let mut new = old.to_vec();
        match kind % 4 {
            0 => {
                let end = (at + n).min(new.len());
                new[at..end].copy_from_slice(&noise(end - at, seed));
            }
            1 => drop(new.splice(at..at, noise(n, seed))),
            2 => drop(new.drain(at..(at + n).min(old.len()))),
            _ => new.truncate(at),
        }
        new
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn rechunking_gives_the_chunks_of_a_whole_cut(
            len in 0usize..(1 << 20),
            edits in proptest::collection::vec((0u8..4, 0usize..(1 << 20), 1usize..70_000), 0..4),
            seed in prop_oneof![Just(0u64), any::<u64>()],
            lag in 0usize..10,
        ) {
            // Low-entropy stretches too, where cuts fall at the largest size.
            let mut old = noise(len, 9);
            for b in old.iter_mut().skip(len / 3).take(len / 4) {
                *b = 0;
            }
            let mut new = old.clone();
            for (i, (kind, at, n)) in edits.into_iter().enumerate() {
                new = edited(&new, kind, at, n, i as u64 + 10);
            }
            let (kept, _) = rechunk(&old, &new, seed, lag);
            prop_assert_eq!(kept, cut_whole(&new, seed));
        }
    }
}
