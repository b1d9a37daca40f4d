//! Hrana 1 over HTTP (what the Python client speaks): `POST /v1/execute` and
//! `POST /v1/batch`. Stateless: each request runs on a pooled connection that goes back
//! to the pool afterwards. A failed `execute` is an HTTP error carrying the Hrana error.

use super::exec::{Caller, ClientConnection, Outcome, Run};
use super::{blocking, Encoding, HranaBody, HranaError, SqlStore, Version};
use crate::auth::{DbRequest, KeyedDbRequest};
use crate::sandbox::CancelToken;
use crate::DataPlaneState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use libsql_hrana::proto;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Deserialize)]
struct ExecuteRequest {
    stmt: proto::Stmt,
}

#[derive(Serialize)]
struct ExecuteResponse {
    result: proto::StmtResult,
}

#[derive(Deserialize)]
struct BatchRequest {
    batch: proto::Batch,
}

#[derive(Serialize)]
struct BatchResponse {
    result: proto::BatchResult,
}

pub(super) async fn execute(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    let outcome = async {
        request.db.ensure_queryable()?;
        let body: ExecuteRequest = parse(&body)?;
        run_stateless(&state, request, move |run| {
            let sqls = no_stored_sql();
            let sql = sqls.resolve(body.stmt.sql.as_deref(), body.stmt.sql_id, Version::Hrana1)?;
            run.authorize(sql)?;
            run.execute(&body.stmt, sql)
        })
        .await
    }
    .await;
    match outcome {
        Ok(Ok(result)) => Json(ExecuteResponse { result }).into_response(),
        Ok(Err(error)) => (status_of(&error.code), Json(error)).into_response(),
        Err(error) => error.into_response(Encoding::Json),
    }
}

pub(super) async fn batch(
    State(state): State<Arc<DataPlaneState>>,
    KeyedDbRequest(request): KeyedDbRequest,
    HranaBody(body): HranaBody,
) -> Response {
    let outcome = async {
        request.db.ensure_queryable()?;
        let body: BatchRequest = parse(&body)?;
        run_stateless(&state, request, move |run| {
            let sqls = no_stored_sql();
            run.authorize_batch(&body.batch, &sqls)?;
            run.batch(&body.batch, &sqls).map(Ok)
        })
        .await
    }
    .await;
    match outcome {
        Ok(Ok(result)) => Json(BatchResponse { result }).into_response(),
        Ok(Err(error)) => (status_of(&error.code), Json(error)).into_response(),
        Err(error) => error.into_response(Encoding::Json),
    }
}

/// Runs `work` on a pooled connection, on a blocking thread.
async fn run_stateless<T: Send + 'static>(
    state: &DataPlaneState,
    request: DbRequest,
    work: impl FnOnce(&Run<'_>) -> Result<Outcome<T>, HranaError> + Send + 'static,
) -> Result<Outcome<T>, HranaError> {
    let cancel = CancelToken::new();
    // The client going away interrupts its statement.
    let _cancel_on_drop = cancel.cancel_on_drop();
    let caller = Caller {
        node: Arc::clone(&state.node),
        db: request.db,
        access: request.access,
        key: request.key,
        version: Version::Hrana1,
        cancel: Some(cancel),
    };
    let node = Arc::clone(&caller.node);
    let db = Arc::clone(&caller.db);
    blocking(&node, &db, move || {
        let conn = ClientConnection::checkout(
            &caller.node,
            &caller.db,
            caller.mode(),
            caller.key.as_deref(),
        )?;
        let outcome = Run::start(&caller, &conn).and_then(|run| work(&run));
        conn.give_back(&caller.node, caller.db.id());
        outcome
    })
    .await?
}

/// Hrana 1 has no stored SQL texts.
fn no_stored_sql() -> SqlStore {
    SqlStore::new(0)
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, HranaError> {
    serde_json::from_slice(body).map_err(|e| {
        HranaError::Protocol(format!("Cannot deserialize client message from JSON: {e}"))
    })
}

/// The HTTP status of a failed `execute`, by Hrana error code (as sqld answers).
fn status_of(code: &str) -> StatusCode {
    match code {
        "ARGS_BOTH_POSITIONAL_AND_NAMED" => StatusCode::NOT_IMPLEMENTED,
        "TRANSACTION_TIMEOUT" | "TRANSACTION_BUSY" => StatusCode::SERVICE_UNAVAILABLE,
        code if code.starts_with("SQLITE_") => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}
