//! What a pull sends: the pages that changed between two positions of the database's
//! stored log, or every page of the database as of one position (a bootstrap, or a
//! client whose revision cannot be compared with the log).

use super::proto::{self, PullHeader, RawEncoding};
use crate::database::PAGE_SIZE;
use crate::error::DataError;
use atoll_storage::segment::Frame;
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// The header of an answer that brings the client to log position `revision`.
pub fn header(revision: u64, db_size: u64) -> PullHeader {
    PullHeader {
        server_revision: revision.to_string(),
        db_size,
        raw_encoding: Some(RawEncoding {}),
        stream_kind: proto::STREAM_PAGES,
        apply_mode: proto::APPLY_INCREMENTAL,
        protocol: proto::PROTOCOL_PAGES,
    }
}

/// The answer for the frames after the client's revision up to `revision` (whole
/// transactions): the newest image of every page they wrote, in page order, and the
/// database's size after the last of them. The client writes the pages as one
/// transaction, the last one its commit.
pub fn changed_pages(revision: u64, frames: &[Frame]) -> Vec<u8> {
    let db_size = frames
        .iter()
        .rev()
        .find(|f| f.size_after > 0)
        .map_or(0, |f| f.size_after);
    let mut newest: BTreeMap<u32, &[u8]> = BTreeMap::new();
    for frame in frames {
        newest.insert(frame.page_no, &frame.page);
    }
    // Pages past the end were freed by a truncation: the commit's size drops them.
    newest.retain(|&page_no, _| page_no <= db_size);
    let mut out = Vec::with_capacity(64 + newest.len() * (PAGE_SIZE as usize + 8));
    proto::put(&header(revision, u64::from(db_size)), &mut out);
    for (page_no, page) in newest {
        proto::put_page(u64::from(page_no) - 1, page, &mut out);
    }
    out
}

/// Writes the whole answer for a database file (a consistent copy as of `revision`):
/// the header, then every page. Answers the bytes written.
pub fn write_state(
    file: &mut std::fs::File,
    revision: u64,
    out: &mut dyn Write,
) -> Result<u64, DataError> {
    let len = file.metadata()?.len();
    let page_size = PAGE_SIZE as usize;
    if len % page_size as u64 != 0 {
        return Err(DataError::Internal(format!(
            "the copy of the database is {len} bytes, not whole pages"
        )));
    }
    let pages = len / page_size as u64;
    let mut message = Vec::with_capacity(64);
    proto::put(&header(revision, pages), &mut message);
    out.write_all(&message)?;
    let mut written = message.len() as u64;
    // 256 pages (1 MiB) read at a time, each framed as it goes out.
    const BATCH: usize = 256;
    let mut buf = vec![0u8; BATCH * page_size];
    let mut framed = Vec::with_capacity(BATCH * (page_size + 8));
    let mut page_id = 0u64;
    while page_id < pages {
        let count = ((pages - page_id) as usize).min(BATCH);
        let chunk = &mut buf[..count * page_size];
        file.read_exact(chunk)?;
        framed.clear();
        for page in chunk.chunks_exact(page_size) {
            proto::put_page(page_id, page, &mut framed);
            page_id += 1;
        }
        out.write_all(&framed)?;
        written += framed.len() as u64;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::proto::PageData;
    use prost::Message;

    fn frame(frame_no: u64, page_no: u32, size_after: u32, fill: u8) -> Frame {
        Frame {
            frame_no,
            checksum: 0,
            page_no,
            size_after,
            page: vec![fill; PAGE_SIZE as usize],
        }
    }

    #[test]
    fn changed_pages_sends_the_newest_image_of_each_page_within_the_final_size() {
        let frames = [
            frame(11, 3, 0, 1),
            frame(12, 1, 4, 2),
            frame(13, 3, 0, 3),
            frame(14, 4, 0, 4),
            frame(15, 2, 3, 5),
        ];
        let body = changed_pages(15, &frames);
        let mut rest = body.as_slice();
        let header = PullHeader::decode_length_delimited(&mut rest).unwrap();
        assert_eq!(header.server_revision, "15");
        assert_eq!(header.db_size, 3);
        let mut pages = Vec::new();
        while !rest.is_empty() {
            let page = PageData::decode_length_delimited(&mut rest).unwrap();
            pages.push((page.page_id, page.encoded_page[0]));
        }
        // Page 4 is past the final size; page 3's newest image is frame 13's.
        assert_eq!(pages, vec![(0, 2), (1, 5), (2, 3)]);
    }
}
