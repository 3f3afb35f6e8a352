//! Local files kept sealed in place, block by block (`seal::FileKey`): a
//! host that reaches its datasets through a gateway holds no store key,
//! and its staged copies must hold nothing readable without a key of its
//! own (seed 000: AES-256 at rest). Other local files are kept as they
//! are (`Sealing::Plain`), through the same calls.
//!
//! Layout: block `i` of the plaintext (`PLAIN` bytes, the last one
//! shorter) is stored at `i * STORED` as nonce ‖ ciphertext ‖ tag, bound
//! to `i`, so a file's length says its plaintext's. A stored block is one
//! page: a write cut short by a crash leaves each block whole, old or
//! new, never torn. A stored block of zeros is a hole (`set_len` grows a
//! file so, without writing) and reads as zeros.
//!
//! A write that covers part of a block reads it, changes it and seals it
//! again; so that no reader meets a block half written, the readers and
//! writers of one file in this process take turns (`turn`).

use super::codec::Codec;
use super::seal::{FileKey, NONCE, OVERHEAD, TAG};
use parking_lot::RwLock;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

/// Bytes of a stored block, and of the plaintext it holds.
pub const STORED: u64 = 4096;
pub const PLAIN: u64 = STORED - OVERHEAD as u64;

/// Bytes sealed at a time when a range is zeroed (a bound on memory).
const ZEROS_AT_ONCE: u64 = 256 * PLAIN;

/// How a host keeps its local files: as they are, or sealed.
#[derive(Clone, Default)]
pub enum Sealing {
    #[default]
    Plain,
    Sealed(Arc<FileKey>),
}

impl Sealing {
    /// Sealed under a sealed store's own key; as they are for a store in
    /// the clear.
    pub fn of(codec: &Codec) -> Sealing {
        match codec {
            Codec::Sealed(keys) => Sealing::Sealed(keys.files()),
            Codec::Plain => Sealing::Plain,
        }
    }

    pub fn is_sealed(&self) -> bool {
        matches!(self, Sealing::Sealed(_))
    }

    /// A name kept beside such files (a path, a link's target), sealed
    /// the same way each time, or as it is.
    pub fn seal_name(&self, name: &[u8]) -> Vec<u8> {
        match self {
            Sealing::Plain => name.to_vec(),
            Sealing::Sealed(k) => k.seal_name(name),
        }
    }

    /// What `seal_name` made, opened; None if it does not open.
    pub fn open_name(&self, sealed: &[u8]) -> Option<Vec<u8>> {
        match self {
            Sealing::Plain => Some(sealed.to_vec()),
            Sealing::Sealed(k) => k.open_name(sealed).ok(),
        }
    }

    /// The plaintext's length of a file `stored` bytes long.
    pub fn plain_len(&self, stored: u64) -> u64 {
        match self {
            Sealing::Plain => stored,
            Sealing::Sealed(_) => plain_len(stored),
        }
    }

    /// The file at `path`, to read.
    pub fn open(&self, path: &Path) -> io::Result<LocalFile> {
        self.open_with(path, OpenOptions::new().read(true))
    }

    /// The file at `path`, opened with `opts` (a truncation leaves an
    /// empty file, which is an empty plaintext either way).
    pub fn open_with(&self, path: &Path, opts: &OpenOptions) -> io::Result<LocalFile> {
        Ok(self.keep(opts.open(path)?))
    }

    /// `file`, kept so.
    pub fn keep(&self, file: File) -> LocalFile {
        let key = match self {
            Sealing::Plain => None,
            Sealing::Sealed(k) => Some(k.clone()),
        };
        LocalFile {
            file: Arc::new(file),
            key,
        }
    }
}

impl std::fmt::Debug for Sealing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Sealing::Plain => "plain",
            Sealing::Sealed(_) => "sealed",
        })
    }
}

fn plain_len(stored: u64) -> u64 {
    (stored / STORED) * PLAIN + (stored % STORED).saturating_sub(OVERHEAD as u64)
}

fn stored_len(plain: u64) -> u64 {
    let (blocks, rest) = (plain / PLAIN, plain % PLAIN);
    blocks * STORED
        + match rest {
            0 => 0,
            r => r + OVERHEAD as u64,
        }
}

fn damaged(index: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "block {index} does not open with this host's key (damaged, or sealed under another key)"
        ),
    )
}

/// Turns of the readers and writers of sealed files in this process, by
/// inode (a few stripes: files meeting on one only wait a little longer).
static TURNS: [RwLock<()>; 64] = [const { RwLock::new(()) }; 64];

fn turn(file: &File) -> io::Result<&'static RwLock<()>> {
    let m = file.metadata()?;
    let at = (m.dev() ^ m.ino().wrapping_mul(0x9e37_79b9_7f4a_7c15)) % TURNS.len() as u64;
    Ok(&TURNS[to_usize(at)])
}

/// A local file, read and written in its plaintext's terms.
pub struct LocalFile {
    file: Arc<File>,
    key: Option<Arc<FileKey>>,
}

impl LocalFile {
    /// The file as the system has it (its metadata, permissions, times;
    /// its bytes are the plaintext only if `!is_sealed()`).
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    pub fn is_sealed(&self) -> bool {
        self.key.is_some()
    }

    /// The plaintext's length.
    pub fn size(&self) -> io::Result<u64> {
        let stored = self.file.metadata()?.len();
        Ok(match self.key {
            None => stored,
            Some(_) => plain_len(stored),
        })
    }

    /// Reads from `at` into `buf`, filling it unless the file ends first:
    /// the bytes read.
    pub fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<usize> {
        let Some(key) = &self.key else {
            return fill_at(&self.file, buf, at);
        };
        let _turn = turn(&self.file)?.read();
        let size = self.size()?;
        if at >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = size.min(at + buf.len() as u64);
        let first = at / PLAIN;
        // Whole blocks: the last one ends where its block or the file does.
        let stored_end = stored_len(size).min(((end - 1) / PLAIN + 1) * STORED);
        let mut stored = vec![0; to_usize(stored_end - first * STORED)];
        if fill_at(&self.file, &mut stored, first * STORED)? < stored.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file became shorter while it was read",
            ));
        }
        for (index, block) in (first..).zip(stored.chunks_mut(to_usize(STORED))) {
            let plain = open(key, index, block)?;
            let start = index * PLAIN;
            let (from, to) = (at.max(start), end.min(start + plain.len() as u64));
            buf[to_usize(from - at)..to_usize(to - at)]
                .copy_from_slice(&plain[to_usize(from - start)..to_usize(to - start)]);
        }
        Ok(to_usize(end - at))
    }

    /// Writes all of `data` at `at` (a gap before it reads as zeros).
    pub fn write_all_at(&self, data: &[u8], at: u64) -> io::Result<()> {
        let Some(key) = &self.key else {
            return self.file.write_all_at(data, at);
        };
        if data.is_empty() {
            return Ok(());
        }
        let _turn = turn(&self.file)?.write();
        let mut size = self.size()?;
        if at > size {
            self.grow(key, size, at)?;
            size = at;
        }
        let end = at + data.len() as u64;
        let after = size.max(end);
        let first = at / PLAIN;
        let mut out = Vec::with_capacity(to_usize(stored_len(after) - first * STORED));
        for index in first..=(end - 1) / PLAIN {
            let start = index * PLAIN;
            let len = PLAIN.min(after - start);
            let (from, to) = (at.max(start) - start, end.min(start + len) - start);
            let block_at = out.len();
            out.resize(block_at + to_usize(len) + OVERHEAD, 0);
            let block = &mut out[block_at..];
            if (from > 0 || to < len) && start < size {
                // Partly written: what the rest of it holds now.
                let old = self.block(key, index, size)?;
                block[NONCE..NONCE + old.len()].copy_from_slice(&old);
            }
            block[NONCE + to_usize(from)..NONCE + to_usize(to)]
                .copy_from_slice(&data[to_usize(start + from - at)..to_usize(start + to - at)]);
            key.seal_block(index, block);
        }
        self.file.write_all_at(&out, first * STORED)
    }

    /// Cuts or grows the file to `size` bytes (grown with zeros).
    pub fn set_len(&self, size: u64) -> io::Result<()> {
        let Some(key) = &self.key else {
            return self.file.set_len(size);
        };
        let _turn = turn(&self.file)?.write();
        let now = self.size()?;
        if size >= now {
            return self.grow(key, now, size);
        }
        let (index, rest) = (size / PLAIN, size % PLAIN);
        let kept = match rest {
            0 => Vec::new(),
            r => self.block(key, index, now)?[..to_usize(r)].to_vec(),
        };
        // Cut first, the shortened block written after: a crash between
        // leaves a shorter file, never a block that does not open.
        self.file.set_len(index * STORED)?;
        if !kept.is_empty() {
            self.write_block(key, index, &kept)?;
        }
        Ok(())
    }

    /// Zeros `[at, at + len)`, growing the file if it ends before.
    pub fn zero(&self, at: u64, len: u64) -> io::Result<()> {
        let mut done = 0;
        while done < len {
            let n = ZEROS_AT_ONCE.min(len - done);
            self.write_all_at(&vec![0; to_usize(n)], at + done)?;
            done += n;
        }
        Ok(())
    }

    /// Makes what is written durable.
    pub fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// Reads the plaintext from its start.
    pub fn reader(&self) -> Reader<'_> {
        Reader { file: self, at: 0 }
    }

    /// Writes the plaintext from its start.
    pub fn writer(&self) -> Writer<'_> {
        Writer { file: self, at: 0 }
    }

    /// Grows a file of `size` bytes to `to`: its last block, if partial,
    /// filled with zeros (sealed again); the blocks after it holes.
    fn grow(&self, key: &FileKey, size: u64, to: u64) -> io::Result<()> {
        let (index, rest) = (size / PLAIN, size % PLAIN);
        if rest > 0 {
            let mut plain = self.block(key, index, size)?;
            plain.resize(to_usize(PLAIN.min(to - index * PLAIN)), 0);
            self.write_block(key, index, &plain)?;
        }
        let stored = stored_len(to);
        match self.file.metadata()?.len() < stored {
            true => self.file.set_len(stored),
            false => Ok(()),
        }
    }

    /// Block `index`'s plaintext, in a file of `size` bytes.
    fn block(&self, key: &FileKey, index: u64, size: u64) -> io::Result<Vec<u8>> {
        let len = PLAIN.min(size - index * PLAIN);
        let mut stored = vec![0; to_usize(len) + OVERHEAD];
        self.file.read_exact_at(&mut stored, index * STORED)?;
        Ok(open(key, index, &mut stored)?.to_vec())
    }

    fn write_block(&self, key: &FileKey, index: u64, plain: &[u8]) -> io::Result<()> {
        let mut block = vec![0; plain.len() + OVERHEAD];
        block[NONCE..NONCE + plain.len()].copy_from_slice(plain);
        key.seal_block(index, &mut block);
        self.file.write_all_at(&block, index * STORED)
    }
}

/// Stored block `index` opened where it lies: its plaintext (zeros for a
/// hole).
fn open<'a>(key: &FileKey, index: u64, block: &'a mut [u8]) -> io::Result<&'a [u8]> {
    if block.len() <= OVERHEAD {
        return Err(damaged(index));
    }
    let end = block.len() - TAG;
    if block.iter().all(|&b| b == 0) {
        return Ok(&block[NONCE..end]);
    }
    key.open_block(index, block).map_err(|_| damaged(index))?;
    Ok(&block[NONCE..end])
}

/// Reads at `at` until `buf` is full or the file ends: the bytes read.
fn fill_at(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn to_usize(n: u64) -> usize {
    crate::limits::to_usize(n)
}

/// `LocalFile::reader`.
pub struct Reader<'a> {
    file: &'a LocalFile,
    at: u64,
}

impl io::Read for Reader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// `LocalFile::writer`.
pub struct Writer<'a> {
    file: &'a LocalFile,
    at: u64,
}

impl io::Write for Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write_all_at(buf, self.at)?;
        self.at += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use crate::store::seal::{Keys, MasterKey};
    use proptest::prelude::*;

    fn sealing() -> Sealing {
        Sealing::Sealed(Keys::derive(&MasterKey::random(), "host").files())
    }

    #[derive(Clone, Debug)]
    enum Op {
        Write(u64, Vec<u8>),
        SetLen(u64),
        Zero(u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let at = prop_oneof![
            0..3 * STORED,
            Just(PLAIN - 1),
            Just(PLAIN),
            Just(2 * PLAIN + 1)
        ];
        prop_oneof![
            (at.clone(), proptest::collection::vec(1u8..=255, 0..9000))
                .prop_map(|(a, d)| Op::Write(a, d)),
            (0..4 * STORED).prop_map(Op::SetLen),
            (at, 0..9000u64).prop_map(|(a, l)| Op::Zero(a, l)),
        ]
    }

    proptest! {
        // Any writes, cuts and zeroings read back as the same on a plain
        // file, at any offset and length; the stored bytes never hold the
        // plaintext's and the length stored says the plaintext's.
        #[test]
        fn a_sealed_file_reads_as_a_plain_one(ops in proptest::collection::vec(op(), 1..12),
                                              reads in proptest::collection::vec((0..4 * STORED, 0..9000usize), 4)) {
            let dir = tempfile::tempdir().unwrap();
            let sealed = sealing().keep(File::options().read(true).write(true).create(true).truncate(true).open(dir.path().join("s")).unwrap());
            let mut model: Vec<u8> = Vec::new();
            for op in &ops {
                match op {
                    Op::Write(at, d) => {
                        sealed.write_all_at(d, *at).unwrap();
                        let end = *at as usize + d.len();
                        // Writing nothing changes nothing, past the end too.
                        if !d.is_empty() {
                            model.resize(model.len().max(end), 0);
                            model[*at as usize..end].copy_from_slice(d);
                        }
                    }
                    Op::SetLen(n) => { sealed.set_len(*n).unwrap(); model.resize(*n as usize, 0); }
                    Op::Zero(at, len) => {
                        sealed.zero(*at, *len).unwrap();
                        let end = (*at + *len) as usize;
                        if *len > 0 && model.len() < end { model.resize(end, 0); }
                        if *len > 0 { model[*at as usize..end].fill(0); }
                    }
                }
                prop_assert_eq!(sealed.size().unwrap(), model.len() as u64);
            }
            let mut whole = Vec::new();
            io::Read::read_to_end(&mut sealed.reader(), &mut whole).unwrap();
            prop_assert_eq!(&whole, &model);
            for (at, len) in reads {
                let mut buf = vec![0xAA; len];
                let n = sealed.read_at(&mut buf, at).unwrap();
                let want = model.get(at as usize..).map_or(&[][..], |m| &m[..m.len().min(len)]);
                prop_assert_eq!(&buf[..n], want);
            }
            let stored = std::fs::read(dir.path().join("s")).unwrap();
            prop_assert_eq!(stored.len() as u64, stored_len(model.len() as u64));
            // Windows of written bytes alone (never zero): a window mostly of
            // zeros can meet a hole's zeros and a nonce's first byte by chance.
            let plain: Vec<&[u8]> = model.windows(32).filter(|w| w.iter().all(|&b| b != 0)).step_by(97).collect();
            for w in plain {
                prop_assert!(stored.windows(32).all(|s| s != w), "plaintext at rest");
            }
        }
    }

    #[test]
    fn readers_never_meet_a_block_half_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let s = sealing();
        let f = s.keep(File::create_new(&path).unwrap());
        f.write_all_at(&vec![1; 4 * PLAIN as usize], 0).unwrap();
        // Another handle of the same file, as another open of it is.
        let r = s.open(&path).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..20_000u64 {
                    f.write_all_at(&[2 + (i % 2) as u8; 3 * PLAIN as usize], i % 100)
                        .unwrap();
                }
                done.store(true, std::sync::atomic::Ordering::Relaxed);
            });
            let mut buf = vec![0; 4 * PLAIN as usize];
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                assert_eq!(r.read_at(&mut buf, 0).unwrap(), buf.len());
                assert!(buf.iter().all(|&b| (1..=3).contains(&b)));
            }
        });
    }

    #[test]
    fn a_changed_or_moved_block_is_refused_and_another_key_reads_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let s = sealing();
        let f = s.keep(File::create_new(&path).unwrap());
        let data: Vec<u8> = (0..3 * PLAIN).map(|i| (i % 251) as u8 + 1).collect();
        f.write_all_at(&data, 0).unwrap();
        let mut buf = vec![0; data.len()];
        // Another key: nothing opens.
        let other = sealing().open(&path).unwrap();
        assert_eq!(
            other.read_at(&mut buf, 0).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        // A flipped byte, or two blocks swapped: refused, never served.
        let mut stored = std::fs::read(&path).unwrap();
        stored[STORED as usize + 100] ^= 1;
        std::fs::write(&path, &stored).unwrap();
        assert!(f.read_at(&mut buf[..10], PLAIN).is_err());
        assert_eq!(f.read_at(&mut buf[..10], 0).unwrap(), 10);
        stored[STORED as usize + 100] ^= 1;
        let (a, b) = stored.split_at_mut(STORED as usize);
        a.swap_with_slice(&mut b[..STORED as usize]);
        std::fs::write(&path, &stored).unwrap();
        assert!(f.read_at(&mut buf[..10], 0).is_err());
    }
}
