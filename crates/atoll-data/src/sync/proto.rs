//! The messages of `POST /pull-updates`, as Turso's sync engine encodes them (protobuf,
//! written here from the fields its 0.7 client sends and reads; `docs/DATA-PLANE.md`,
//! "Turso Sync"). The answer is a stream of length-delimited messages: one
//! [`PullHeader`], then a [`PageData`] per page.

/// `encoding` of a request: the pages raw or zstd-compressed. Atoll always answers raw
/// (the 0.7 client asks for raw and cannot decode zstd).
pub const ENCODING_RAW: i32 = 0;

/// `stream_kind`: pages (0) or an MVCC logical log (1), which Atoll does not serve.
pub const STREAM_PAGES: i32 = 0;

/// `apply_mode` of an answer: the pages go on top of what the client has (0), or replace
/// its base (1, which the 0.7 client refuses for page streams). Atoll answers 0 only.
pub const APPLY_INCREMENTAL: i32 = 0;

/// `protocol` of an answer: the remote speaks page streams (1), not MVCC logs (2).
pub const PROTOCOL_PAGES: i32 = 1;

/// The request body.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PullRequest {
    #[prost(int32, tag = "1")]
    pub encoding: i32,
    /// Pin the answer to this revision (chunked bootstraps and partial sync, with a page
    /// selector); empty: the newest.
    #[prost(string, tag = "2")]
    pub server_revision: String,
    /// The revision the client has; empty for a client with nothing (a bootstrap).
    #[prost(string, tag = "3")]
    pub client_revision: String,
    /// How long to wait for something newer than `client_revision` (0: do not wait).
    #[prost(uint32, tag = "4")]
    pub long_poll_timeout_ms: u32,
    /// A RoaringBitmap of the page ids (page number - 1) wanted; empty: all of them.
    #[prost(bytes = "vec", tag = "5")]
    pub server_pages_selector: Vec<u8>,
    /// Pages the client holds (partial sync).
    #[prost(bytes = "vec", tag = "6")]
    pub client_pages: Vec<u8>,
    /// A query whose pages are wanted (partial sync).
    #[prost(string, tag = "7")]
    pub server_query_selector: String,
    #[prost(int32, tag = "8")]
    pub stream_kind: i32,
}

/// The first message of an answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PullHeader {
    /// The revision the pages bring the client to: the client sends it back next time.
    #[prost(string, tag = "1")]
    pub server_revision: String,
    /// The database's size in pages at that revision.
    #[prost(uint64, tag = "2")]
    pub db_size: u64,
    /// Present (and empty): the pages are raw.
    #[prost(message, optional, tag = "3")]
    pub raw_encoding: Option<RawEncoding>,
    #[prost(int32, tag = "5")]
    pub stream_kind: i32,
    #[prost(int32, tag = "6")]
    pub apply_mode: i32,
    #[prost(int32, tag = "8")]
    pub protocol: i32,
}

/// An empty message whose presence says "raw pages".
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawEncoding {}

/// One page of an answer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PageData {
    /// The page number minus one.
    #[prost(uint64, tag = "1")]
    pub page_id: u64,
    #[prost(bytes = "vec", tag = "2")]
    pub encoded_page: Vec<u8>,
}

/// Appends `message` with its varint length in front, as the client reads the stream.
pub fn put(message: &impl prost::Message, out: &mut Vec<u8>) {
    message
        .encode_length_delimited(out)
        .expect("a Vec grows as needed");
}

/// Appends a length-delimited [`PageData`] without copying the page into one first (a
/// bootstrap sends every page of the database).
pub fn put_page(page_id: u64, page: &[u8], out: &mut Vec<u8>) {
    use prost::encoding::{encode_varint, encoded_len_varint};
    // Field 1 (varint, key 0x08) and field 2 (bytes, key 0x12).
    let body =
        1 + encoded_len_varint(page_id) + 1 + encoded_len_varint(page.len() as u64) + page.len();
    encode_varint(body as u64, out);
    out.push(0x08);
    encode_varint(page_id, out);
    out.push(0x12);
    encode_varint(page.len() as u64, out);
    out.extend_from_slice(page);
}

/// An answer read back: its header and its pages (for clients of Atoll's own, such as
/// `atoll bench`).
pub fn decode_answer(body: &[u8]) -> Result<(PullHeader, Vec<PageData>), prost::DecodeError> {
    use prost::Message;
    let mut rest = body;
    let header = PullHeader::decode_length_delimited(&mut rest)?;
    let mut pages = Vec::new();
    while !rest.is_empty() {
        pages.push(PageData::decode_length_delimited(&mut rest)?);
    }
    Ok((header, pages))
}

impl PullRequest {
    /// The request's body.
    pub fn to_body(&self) -> Vec<u8> {
        prost::Message::encode_to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn a_page_written_by_hand_decodes_as_page_data() {
        let page = vec![7u8; 4096];
        let mut out = Vec::new();
        put_page(300, &page, &mut out);
        let decoded = PageData::decode_length_delimited(out.as_slice()).unwrap();
        assert_eq!(decoded.page_id, 300);
        assert_eq!(decoded.encoded_page, page);
    }
}
