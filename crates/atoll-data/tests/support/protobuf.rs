//! Hrana's protobuf messages as a client encodes and decodes them (the server-side types
//! of `libsql-hrana` only encode responses and only decode requests).

use libsql_hrana::proto::{Batch, Error, Stmt, StmtResult};

#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(prost::Message)]
pub struct PipelineRequest {
    #[prost(string, optional, tag = "1")]
    pub baton: Option<String>,
    #[prost(message, repeated, tag = "2")]
    pub requests: Vec<StreamRequest>,
}

#[derive(prost::Message)]
pub struct StreamRequest {
    #[prost(oneof = "Request", tags = "1, 2")]
    pub request: Option<Request>,
}

#[derive(prost::Oneof)]
pub enum Request {
    #[prost(message, tag = "1")]
    Close(Empty),
    #[prost(message, tag = "2")]
    Execute(ExecuteRequest),
}

#[derive(prost::Message)]
pub struct ExecuteRequest {
    #[prost(message, required, tag = "1")]
    pub stmt: Stmt,
}

#[derive(prost::Message)]
pub struct PipelineResponse {
    #[prost(string, optional, tag = "1")]
    pub baton: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub base_url: Option<String>,
    #[prost(message, repeated, tag = "3")]
    pub results: Vec<StreamResult>,
}

#[derive(prost::Message)]
pub struct StreamResult {
    #[prost(oneof = "Outcome", tags = "1, 2")]
    pub outcome: Option<Outcome>,
}

#[derive(prost::Oneof)]
pub enum Outcome {
    #[prost(message, tag = "1")]
    Ok(StreamResponse),
    #[prost(message, tag = "2")]
    Error(Error),
}

#[derive(prost::Message)]
pub struct StreamResponse {
    #[prost(oneof = "Response", tags = "1, 2")]
    pub response: Option<Response>,
}

#[derive(prost::Oneof)]
pub enum Response {
    #[prost(message, tag = "1")]
    Close(Empty),
    #[prost(message, tag = "2")]
    Execute(ExecuteResponse),
}

#[derive(prost::Message)]
pub struct ExecuteResponse {
    #[prost(message, required, tag = "1")]
    pub result: StmtResult,
}

#[derive(prost::Message)]
pub struct CursorRequest {
    #[prost(string, optional, tag = "1")]
    pub baton: Option<String>,
    #[prost(message, required, tag = "2")]
    pub batch: Batch,
}

#[derive(prost::Message)]
pub struct CursorHead {
    #[prost(string, optional, tag = "1")]
    pub baton: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub base_url: Option<String>,
}

#[derive(prost::Message)]
pub struct CursorEntry {
    #[prost(oneof = "Entry", tags = "1, 2, 4")]
    pub entry: Option<Entry>,
}

#[derive(prost::Oneof)]
pub enum Entry {
    #[prost(message, tag = "1")]
    StepBegin(libsql_hrana::proto::StepBeginEntry),
    #[prost(message, tag = "2")]
    StepEnd(libsql_hrana::proto::StepEndEntry),
    #[prost(message, tag = "4")]
    Row(libsql_hrana::proto::Row),
}
