//! An SQL session over the data plane: Hrana 3 over HTTP (`POST /v3/pipeline`, JSON), with
//! the baton the server hands back sent with the next request, so every statement runs on
//! the same connection and a `BEGIN` in one request is still open in the next. Wire types
//! are `libsql-hrana`'s, the protocol crate shared with libSQL's own clients.

use super::client::CliError;
use super::data_plane::{failure, DataPlane};
use libsql_hrana::proto::{
    Batch, BatchStreamReq, CloseStreamReq, ExecuteStreamReq, GetAutocommitStreamReq,
    PipelineRespBody, Stmt, StmtResult, StreamRequest, StreamResponse, StreamResult, Value,
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

impl StatementError {
    /// SQLite's own words, for a one-line error that carries the code once: the server's
    /// message repeats the kind its code already says (`SQL input error: …`,
    /// `SQLite error: …`) and puts the offset in brackets, which stacked up with the
    /// statement and the code into `(…) (…) (…)`.
    pub fn reason(&self) -> String {
        let message = ["SQL input error: ", "SQLite error: "]
            .iter()
            .find_map(|prefix| self.message.strip_prefix(prefix))
            .unwrap_or(&self.message);
        match message
            .strip_suffix(')')
            .and_then(|m| m.rsplit_once(" (at offset "))
        {
            Some((reason, offset)) if offset.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{reason} at offset {offset}")
            }
            _ => message.to_string(),
        }
    }
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
    /// Whether the server said, last time it was asked, that a transaction is open.
    in_transaction: bool,
    /// Requests sent so far (what `--verbose` reports).
    pub requests_sent: usize,
}

impl<'a> SqlSession<'a> {
    pub fn new(plane: &'a DataPlane<'a>) -> SqlSession<'a> {
        SqlSession {
            plane,
            baton: None,
            in_transaction: false,
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
            .pipeline(vec![
                StreamRequest::Batch(BatchStreamReq { batch }),
                StreamRequest::GetAutocommit(GetAutocommitStreamReq {}),
            ])
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

    /// Whether a transaction was open after the last batch or prompt statement.
    pub fn in_transaction(&self) -> bool {
        self.in_transaction
    }

    /// Ends the session; the server rolls back a transaction still open.
    pub async fn close(&mut self) {
        if self.baton.is_some() {
            let _ = self
                .send_pipeline(&[StreamRequest::Close(CloseStreamReq {})])
                .await;
        }
        self.baton = None;
        self.in_transaction = false;
    }

    /// Sends requests on the session. The server closes a session idle for 10 s; when that
    /// happened outside a transaction nothing is lost, so the requests go again on a new
    /// session (the server refuses an expired baton before running anything).
    async fn pipeline(
        &mut self,
        requests: Vec<StreamRequest>,
    ) -> Result<Vec<StreamResult>, CliError> {
        let had_session = self.baton.is_some();
        let was_in_transaction = self.in_transaction;
        match self.send_pipeline(&requests).await {
            Err(error) if error.code == "STREAM_EXPIRED" && had_session && !was_in_transaction => {
                self.send_pipeline(&requests).await
            }
            answer => answer,
        }
    }

    async fn send_pipeline(
        &mut self,
        requests: &[StreamRequest],
    ) -> Result<Vec<StreamResult>, CliError> {
        /// `PipelineReqBody`, borrowing the requests so they can be sent again.
        #[derive(serde::Serialize)]
        struct PipelineRequest<'r> {
            baton: Option<&'r str>,
            requests: &'r [StreamRequest],
        }
        let count = requests.len();
        let body = serde_json::to_vec(&PipelineRequest {
            baton: self.baton.as_deref(),
            requests,
        })
        .expect("Hrana requests serialize");
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
            // The server has dropped the stream (and any transaction with it): the next
            // request starts a new one.
            self.baton = None;
            self.in_transaction = false;
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
        for result in &answer.results {
            if let StreamResult::Ok {
                response: StreamResponse::GetAutocommit(state),
            } = result
            {
                self.in_transaction = !state.is_autocommit;
            }
        }
        Ok(answer.results)
    }
}

fn unexpected() -> CliError {
    CliError::local(
        "unexpected answer from the data plane: the results do not match the requests",
        "is the server an Atoll server of the same version?",
    )
}

#[cfg(test)]
mod tests {
    use super::StatementError;

    fn reason(message: &str) -> String {
        StatementError {
            index: 0,
            message: message.into(),
            code: "SQL_INPUT_ERROR".into(),
        }
        .reason()
    }

    #[test]
    fn the_reason_drops_what_the_code_says_and_the_brackets() {
        assert_eq!(
            reason("SQL input error: near \"SELEC\": syntax error (at offset 0)"),
            "near \"SELEC\": syntax error at offset 0"
        );
        assert_eq!(
            reason("SQLite error: UNIQUE constraint failed: t.x"),
            "UNIQUE constraint failed: t.x"
        );
        assert_eq!(
            reason("Operation was blocked (maybe)"),
            "Operation was blocked (maybe)"
        );
    }
}
