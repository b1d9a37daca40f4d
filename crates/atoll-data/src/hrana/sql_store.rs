//! SQL texts stored with `store_sql`: per stream over HTTP, per connection over WebSocket.

use super::{HranaError, Version};
use crate::hrana::exec::hrana_error;
use libsql_hrana::proto;
use std::collections::HashMap;

/// Texts over HTTP are per stream, so few are needed (the TypeScript client keeps at most
/// 30 per transaction); a WebSocket connection shares its texts among all its streams.
pub(crate) const MAX_HTTP_STORED_SQL: usize = 50;
pub(crate) const MAX_WS_STORED_SQL: usize = 150;
/// Clients only store shorter texts and send longer ones inline.
pub(crate) const MAX_STORED_SQL_BYTES: usize = 5000;

#[derive(Debug, Clone)]
pub(crate) struct SqlStore {
    texts: HashMap<i32, String>,
    max_count: usize,
}

impl SqlStore {
    pub(crate) fn new(max_count: usize) -> SqlStore {
        SqlStore {
            texts: HashMap::new(),
            max_count,
        }
    }

    /// Stores a text; reusing a live id breaks the protocol, the limits are the client's
    /// problem to handle.
    pub(crate) fn store(
        &mut self,
        sql_id: i32,
        sql: String,
    ) -> Result<Result<(), proto::Error>, HranaError> {
        if self.texts.contains_key(&sql_id) {
            return Err(HranaError::Protocol(format!(
                "SQL text {sql_id} already exists"
            )));
        }
        if self.texts.len() >= self.max_count {
            return Ok(Err(hrana_error(
                "SQL_STORE_TOO_MANY",
                format!(
                    "The server already stores {} SQL texts, it cannot store more",
                    self.texts.len()
                ),
            )));
        }
        if sql.len() > MAX_STORED_SQL_BYTES {
            return Ok(Err(hrana_error(
                "SQL_STORE_TOO_LARGE",
                format!(
                    "The statement is too large to be stored: {} bytes, at most {MAX_STORED_SQL_BYTES}",
                    sql.len()
                ),
            )));
        }
        self.texts.insert(sql_id, sql);
        Ok(Ok(()))
    }

    /// Forgets a text; an unknown id is fine.
    pub(crate) fn close(&mut self, sql_id: i32) {
        self.texts.remove(&sql_id);
    }

    /// The text a request names, inline (`sql`) or stored (`sql_id`): exactly one of them.
    pub(crate) fn resolve<'a>(
        &'a self,
        sql: Option<&'a str>,
        sql_id: Option<i32>,
        version: Version,
    ) -> Result<&'a str, HranaError> {
        if sql_id.is_some() && version < Version::Hrana2 {
            return Err(HranaError::Protocol(
                "`sql_id` is only supported in protocol version hrana2 and higher".into(),
            ));
        }
        match (sql, sql_id) {
            (Some(sql), None) => Ok(sql),
            (None, Some(sql_id)) => self
                .texts
                .get(&sql_id)
                .map(String::as_str)
                .ok_or_else(|| HranaError::Protocol(format!("SQL text {sql_id} not found"))),
            (Some(_), Some(_)) => Err(HranaError::Protocol(
                "Either `sql` or `sql_id` are required, but not both".into(),
            )),
            (None, None) => Err(HranaError::Protocol(
                "Either `sql` or `sql_id` are required".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_lookups() {
        let mut store = SqlStore::new(2);
        assert!(store.store(1, "SELECT 1".into()).unwrap().is_ok());
        assert!(matches!(
            store.store(1, "SELECT 2".into()),
            Err(HranaError::Protocol(_))
        ));
        let too_large = store.store(2, "x".repeat(5001)).unwrap().unwrap_err();
        assert_eq!(too_large.code, "SQL_STORE_TOO_LARGE");
        assert!(store.store(2, "SELECT 2".into()).unwrap().is_ok());
        let too_many = store.store(3, "SELECT 3".into()).unwrap().unwrap_err();
        assert_eq!(too_many.code, "SQL_STORE_TOO_MANY");
        assert_eq!(
            store.resolve(None, Some(2), Version::Hrana2).unwrap(),
            "SELECT 2"
        );
        assert!(store.resolve(None, Some(2), Version::Hrana1).is_err());
        assert!(store.resolve(Some("x"), Some(2), Version::Hrana3).is_err());
        assert!(store.resolve(None, None, Version::Hrana3).is_err());
        store.close(2);
        store.close(42);
        assert!(store.resolve(None, Some(2), Version::Hrana3).is_err());
    }
}
