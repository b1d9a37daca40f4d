//! Log segments: runs of whole transactions, numbered globally per database, checksummed
//! frame by frame (a rolling checksum that chains every frame to the one before) and whole
//! (a trailing SHA-256). `docs/STORAGE.md` ("The layout in object storage") is the same
//! description for readers who are not reading code.
//!
//! ```text
//! "ATOLLSEG" | version u32 | id length u16 | database id | first u64 | last u64
//!   | checksum before first u64 | frame count u32 | commit count u32
//! commits:  (commit frame_no u64, commit time ms i64) × commit count
//! frames:   (frame_no u64, checksum u64, page_no u32, size_after u32, page) × frame count
//! SHA-256 of everything above
//! ```
//!
//! Integers are little-endian. The frame header is libSQL's replication frame header, so
//! the same frames can feed replicas without re-encoding.

use sha2::{Digest, Sha256};

const MAGIC: &[u8; 8] = b"ATOLLSEG";
const VERSION: u32 = 1;
pub const FRAME_HEADER_BYTES: usize = 24;

/// One page image of one transaction, with its place in the database's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub frame_no: u64,
    pub checksum: u64,
    pub page_no: u32,
    /// Database size in pages after the transaction; non-zero only on its commit frame.
    pub size_after: u32,
    pub page: Vec<u8>,
}

/// The rolling checksum of a frame after `previous`.
pub fn frame_checksum(previous: u64, page_no: u32, size_after: u32, page: &[u8]) -> u64 {
    let mut hasher = Sha256::new();
    hasher.update(previous.to_le_bytes());
    hasher.update(page_no.to_le_bytes());
    hasher.update(size_after.to_le_bytes());
    hasher.update(page);
    let digest = hasher.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// A decoded, verified segment.
#[derive(Debug, Clone)]
pub struct Segment {
    pub database_id: String,
    pub first: u64,
    pub last: u64,
    /// The checksum of frame `first - 1` (0 before frame 1).
    pub previous_checksum: u64,
    /// Each transaction's commit frame and commit time (ms since the epoch).
    pub commits: Vec<(u64, i64)>,
    pub frames: Vec<Frame>,
}

impl Segment {
    /// The checksum of its last frame, which the next segment must start from.
    pub fn last_checksum(&self) -> u64 {
        self.frames
            .last()
            .map_or(self.previous_checksum, |f| f.checksum)
    }

    pub fn encode(&self) -> Vec<u8> {
        let page_bytes = self.frames.first().map_or(0, |f| f.page.len());
        let mut out = Vec::with_capacity(
            64 + self.commits.len() * 16 + self.frames.len() * (FRAME_HEADER_BYTES + page_bytes),
        );
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.database_id.len() as u16).to_le_bytes());
        out.extend_from_slice(self.database_id.as_bytes());
        out.extend_from_slice(&self.first.to_le_bytes());
        out.extend_from_slice(&self.last.to_le_bytes());
        out.extend_from_slice(&self.previous_checksum.to_le_bytes());
        out.extend_from_slice(&(self.frames.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.commits.len() as u32).to_le_bytes());
        for (frame_no, ms) in &self.commits {
            out.extend_from_slice(&frame_no.to_le_bytes());
            out.extend_from_slice(&ms.to_le_bytes());
        }
        for frame in &self.frames {
            out.extend_from_slice(&frame.frame_no.to_le_bytes());
            out.extend_from_slice(&frame.checksum.to_le_bytes());
            out.extend_from_slice(&frame.page_no.to_le_bytes());
            out.extend_from_slice(&frame.size_after.to_le_bytes());
            out.extend_from_slice(&frame.page);
        }
        let digest = Sha256::digest(&out);
        out.extend_from_slice(&digest);
        out
    }

    /// Decodes and verifies a segment: its SHA-256, its header against `database_id`,
    /// frame numbers without gaps, the checksum chain, and whole transactions. Any failure
    /// is an error naming what is wrong; nothing of a damaged segment is ever applied.
    pub fn decode(bytes: &[u8], database_id: &str, page_size: usize) -> Result<Segment, String> {
        if bytes.len() < MAGIC.len() + 32 {
            return Err(format!("truncated ({} bytes)", bytes.len()));
        }
        let (body, digest) = bytes.split_at(bytes.len() - 32);
        if Sha256::digest(body).as_slice() != digest {
            return Err("its SHA-256 does not match its content (corrupt or truncated)".into());
        }
        let mut r = Reader { bytes: body, at: 0 };
        if r.take(8)? != MAGIC {
            return Err("not an Atoll log segment".into());
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!("segment version {version} is not supported"));
        }
        let id_len = r.u16()? as usize;
        let id = String::from_utf8_lossy(r.take(id_len)?).into_owned();
        if id != database_id {
            return Err(format!("it belongs to database {id}, not {database_id}"));
        }
        let first = r.u64()?;
        let last = r.u64()?;
        let previous_checksum = r.u64()?;
        let frame_count = r.u32()? as usize;
        let commit_count = r.u32()? as usize;
        if frame_count == 0 || last < first || (last - first + 1) as usize != frame_count {
            return Err(format!(
                "its header says frames {first}..={last} but holds {frame_count}"
            ));
        }
        let mut commits = Vec::with_capacity(commit_count);
        for _ in 0..commit_count {
            commits.push((r.u64()?, r.u64()? as i64));
        }
        let mut frames = Vec::with_capacity(frame_count);
        let mut running = previous_checksum;
        let mut commit_frames = Vec::with_capacity(commit_count);
        for expected in first..=last {
            let frame_no = r.u64()?;
            let checksum = r.u64()?;
            let page_no = r.u32()?;
            let size_after = r.u32()?;
            let page = r.take(page_size)?.to_vec();
            if frame_no != expected {
                return Err(format!("frame {frame_no} found where {expected} belongs"));
            }
            if frame_checksum(running, page_no, size_after, &page) != checksum {
                return Err(format!("frame {frame_no} breaks the checksum chain"));
            }
            if size_after != 0 {
                commit_frames.push(frame_no);
            }
            running = checksum;
            frames.push(Frame {
                frame_no,
                checksum,
                page_no,
                size_after,
                page,
            });
        }
        if r.at != body.len() {
            return Err("trailing bytes after its last frame".into());
        }
        if frames.last().is_some_and(|f| f.size_after == 0) {
            return Err("its last transaction is not whole".into());
        }
        if commit_frames != commits.iter().map(|(f, _)| *f).collect::<Vec<_>>() {
            return Err("its commit table does not match its commit frames".into());
        }
        Ok(Segment {
            database_id: id,
            first,
            last,
            previous_checksum,
            commits,
            frames,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let Some(end) = end else {
            return Err("truncated".into());
        };
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> Segment {
        let mut frames = Vec::new();
        let mut running = 7;
        for (i, size_after) in [(5u64, 0u32), (6, 2), (7, 3)] {
            let page = vec![i as u8; 64];
            let checksum = frame_checksum(running, i as u32, size_after, &page);
            running = checksum;
            frames.push(Frame {
                frame_no: i,
                checksum,
                page_no: i as u32,
                size_after,
                page,
            });
        }
        Segment {
            database_id: "db".into(),
            first: 5,
            last: 7,
            previous_checksum: 7,
            commits: vec![(6, 1000), (7, 2000)],
            frames,
        }
    }

    #[test]
    fn round_trips() {
        let s = segment();
        let decoded = Segment::decode(&s.encode(), "db", 64).unwrap();
        assert_eq!(decoded.frames, s.frames);
        assert_eq!(decoded.commits, s.commits);
        assert_eq!(decoded.last_checksum(), s.frames[2].checksum);
    }

    #[test]
    fn damage_is_detected_and_named() {
        let bytes = segment().encode();
        let mut flipped = bytes.clone();
        flipped[100] ^= 1;
        assert!(Segment::decode(&flipped, "db", 64)
            .unwrap_err()
            .contains("SHA-256"));
        assert!(Segment::decode(&bytes[..bytes.len() - 10], "db", 64).is_err());
        assert!(Segment::decode(&bytes, "other", 64)
            .unwrap_err()
            .contains("belongs to database db"));
    }
}
