//! The request decoding of Hrana over HTTP without a database: what the fuzz targets in
//! `fuzz/` and the corpus replay test (`tests/fuzz_corpus.rs`) drive, so they exercise
//! exactly the code a request body meets before any SQL runs.

use super::http::decode;
use super::statement::{AttachRequest, StatementKind};
use super::values::SqlArg;
use super::Encoding;
use libsql_hrana::proto;

/// Which request body of Hrana over HTTP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `POST /v2/pipeline`, `/v3/pipeline`, `/v3-protobuf/pipeline`.
    Pipeline,
    /// `POST /v3/cursor`, `/v3-protobuf/cursor`.
    Cursor,
}

/// Decodes `body` as the server does, then reads every statement in it the way the
/// executor does before running it: its kind from the leading keywords, the target of an
/// ATTACH, and every argument as an SQL value. Returns the number of statements, or the
/// protocol error the client would get.
pub fn inspect_request(
    kind: RequestKind,
    encoding: Encoding,
    body: &[u8],
) -> Result<usize, String> {
    let mut statements = 0;
    let mut visit = |stmt: &proto::Stmt| -> Result<(), String> {
        statements += 1;
        if let Some(sql) = &stmt.sql {
            inspect_sql(sql);
        }
        let named = stmt.named_args.iter().map(|arg| &arg.value);
        for value in stmt.args.iter().chain(named) {
            SqlArg::new(value).map_err(|e| format!("{e:?}"))?;
        }
        Ok(())
    };
    match kind {
        RequestKind::Pipeline => {
            let body: proto::PipelineReqBody =
                decode(body, encoding).map_err(|e| format!("{e:?}"))?;
            for request in &body.requests {
                match request {
                    proto::StreamRequest::Execute(req) => visit(&req.stmt)?,
                    proto::StreamRequest::Batch(req) => {
                        for step in &req.batch.steps {
                            visit(&step.stmt)?;
                        }
                    }
                    proto::StreamRequest::Sequence(proto::SequenceStreamReq {
                        sql: Some(sql),
                        ..
                    })
                    | proto::StreamRequest::Describe(proto::DescribeStreamReq {
                        sql: Some(sql),
                        ..
                    })
                    | proto::StreamRequest::StoreSql(proto::StoreSqlStreamReq { sql, .. }) => {
                        inspect_sql(sql)
                    }
                    _ => {}
                }
            }
        }
        RequestKind::Cursor => {
            let body: proto::CursorReqBody =
                decode(body, encoding).map_err(|e| format!("{e:?}"))?;
            for step in &body.batch.steps {
                visit(&step.stmt)?;
            }
        }
    }
    Ok(statements)
}

fn inspect_sql(sql: &str) {
    if StatementKind::of(sql) == StatementKind::Attach {
        let _ = AttachRequest::parse(sql);
    }
}
