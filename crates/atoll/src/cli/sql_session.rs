//! An SQL session over the data plane: Hrana 3 over HTTP (`POST /v3/pipeline`, JSON), with
//! the baton the server hands back sent with the next request, so every statement runs on
//! the same connection and a `BEGIN` in one request is still open in the next. Wire types
//! are `libsql-hrana`'s, the protocol crate shared with libSQL's own clients.

use super::client::CliError;
use super::data_plane::{failure, DataPlane};
use libsql_hrana::proto::{
    Batch, BatchStreamReq, CloseStreamReq, ExecuteStreamReq, GetAutocommitStreamReq,
    PipelineReqBody, PipelineRespBody, Stmt, StmtResult, StreamRequest, StreamResponse,
    StreamResult, Value,
};
use reqwest::Method;

/// A statement the server refused: where it was and what the server said.
#[derive(Debug)]
pub struct StatementError {
    /// Index of the failing statement among those sent together.
    pub index: usize,
    pub message: String,
    pub code: String,
}

pub enum SessionError {
    /// A statement failed; the session is still usable.
    Statement(StatementError),
    /// The request itself failed (unreachable, refused, expired session).
    Request(CliError),
}

impl From<CliError> for SessionError {
    fn from(e: CliError) -> Self {
        SessionError::Request(e)
    }
}

pub struct SqlSession<'a> {
    plane: &'a DataPlane<'a>,
    baton: Option<String>,
    /// Requests sent so far (what `--verbose` reports).
    pub requests_sent: usize,
}

impl<'a> SqlSession<'a> {
    pub fn new(plane: &'a DataPlane<'a>) -> SqlSession<'a> {
        SqlSession {
            plane,
            baton: None,
            requests_sent: 0,
        }
    }

    /// Runs one statement, with positional arguments.
    pub async fn execute(
        &mut self,
        sql: &str,
        args: Vec<Value>,
    ) -> Result<StmtResult, SessionError> {
        let mut stmt = Stmt::new(sql, true);
        stmt.args = args;
        let mut results = self
            .pipeline(vec![StreamRequest::Execute(ExecuteStreamReq { stmt })])
            .await?;
        match results.remove(0) {
            StreamResult::Ok {
                response: StreamResponse::Execute(answer),
            } => Ok(answer.result),
            StreamResult::Error { error } => Err(SessionError::Statement(StatementError {
                index: 0,
                message: error.message,
                code: error.code,
            })),
            _ => Err(unexpected().into()),
        }
    }

    /// Runs one statement typed at the prompt, keeping the server session only while a
    /// transaction is open: the server closes a session idle for 10 s, and a user who pauses
    /// between two statements outside a transaction must not see an error for it.
    pub async fn run_statement(&mut self, sql: &str) -> Result<StmtResult, SessionError> {
        let stmt = Stmt::new(sql, true);
        let mut results = self
            .pipeline(vec![
                StreamRequest::Execute(ExecuteStreamReq { stmt }),
                StreamRequest::GetAutocommit(GetAutocommitStreamReq {}),
            ])
            .await?;
        let autocommit = matches!(
            results.pop(),
            Some(StreamResult::Ok {
                response: StreamResponse::GetAutocommit(answer)
            }) if answer.is_autocommit
        );
        if autocommit {
            self.close().await;
        }
        match results.remove(0) {
            StreamResult::Ok {
                response: StreamResponse::Execute(answer),
            } => Ok(answer.result),
            StreamResult::Error { error } => Err(SessionError::Statement(StatementError {
                index: 0,
                message: error.message,
                code: error.code,
            })),
            _ => Err(unexpected().into()),
        }
    }

    /// Runs statements in order in one request, each only if the one before succeeded; the
    /// first failure stops the rest. Answers every statement's result.
    pub async fn run_batch(&mut self, sqls: &[&str]) -> Result<Vec<StmtResult>, SessionError> {
        let batch: Batch = sqls.iter().map(|sql| Stmt::new(*sql, true)).collect();
        let mut results = self
            .pipeline(vec![StreamRequest::Batch(BatchStreamReq { batch })])
            .await?;
        let result = match results.remove(0) {
            StreamResult::Ok {
                response: StreamResponse::Batch(answer),
            } => answer.result,
            StreamResult::Error { error } => {
                return Err(SessionError::Statement(StatementError {
                    index: 0,
                    message: error.message,
                    code: error.code,
                }))
            }
            _ => return Err(unexpected().into()),
        };
        if let Some((index, error)) = result
            .step_errors
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.as_ref().map(|e| (i, e)))
        {
            return Err(SessionError::Statement(StatementError {
                index,
                message: error.message.clone(),
                code: error.code.clone(),
            }));
        }
        if result.step_results.len() != sqls.len() {
            return Err(unexpected().into());
        }
        Ok(result
            .step_results
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect())
    }

    /// Whether the connection is outside any transaction.
    pub async fn is_autocommit(&mut self) -> Result<bool, SessionError> {
        let mut results = self
            .pipeline(vec![StreamRequest::GetAutocommit(
                GetAutocommitStreamReq {},
            )])
            .await?;
        match results.remove(0) {
            StreamResult::Ok {
                response: StreamResponse::GetAutocommit(answer),
            } => Ok(answer.is_autocommit),
            _ => Err(unexpected().into()),
        }
    }

    /// Ends the session; the server rolls back a transaction still open.
    pub async fn close(&mut self) {
        if self.baton.is_some() {
            let _ = self
                .pipeline(vec![StreamRequest::Close(CloseStreamReq {})])
                .await;
        }
        self.baton = None;
    }

    async fn pipeline(
        &mut self,
        requests: Vec<StreamRequest>,
    ) -> Result<Vec<StreamResult>, CliError> {
        let count = requests.len();
        let body = PipelineReqBody {
            baton: self.baton.clone(),
            requests,
        };
        let body = serde_json::to_vec(&body).expect("Hrana requests serialize");
        let request = self
            .plane
            .request(Method::POST, "v3/pipeline")
            .await?
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        self.requests_sent += 1;
        let response = self.plane.send("run SQL", request).await?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.plane.unreachable("read the SQL results", &e))?;
        if !status.is_success() {
            // The server has dropped the stream: the next request starts a new one.
            self.baton = None;
            let mut error = failure("run SQL", status, &bytes);
            if error.code == "STREAM_EXPIRED" {
                error.hint = "the session was idle too long and the server closed it, rolling back any open transaction; run the statements again".into();
            }
            return Err(error);
        }
        let answer: PipelineRespBody = serde_json::from_slice(&bytes).map_err(|e| {
            CliError::local(
                format!("unexpected answer from the data plane: {e}"),
                "is the server an Atoll server of the same version?",
            )
        })?;
        if answer.results.len() != count {
            return Err(unexpected());
        }
        self.baton = answer.baton;
        Ok(answer.results)
    }
}

fn unexpected() -> CliError {
    CliError::local(
        "unexpected answer from the data plane: the results do not match the requests",
        "is the server an Atoll server of the same version?",
    )
}
