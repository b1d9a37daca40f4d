//! The narrow interface the store's operations are written against.

use crate::error::{Result, StoreError};

/// A SQL parameter or column value. Booleans are stored as integers 0/1 and times as
/// milliseconds since the epoch, which both backends represent the same way.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(i64::from(v))
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Self {
        Value::Text(v.clone())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// One result row.
#[derive(Debug, Clone)]
pub struct Row(pub Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> &Value {
        self.0.get(i).unwrap_or(&Value::Null)
    }
    pub fn int(&self, i: usize) -> i64 {
        self.opt_int(i).unwrap_or(0)
    }
    pub fn opt_int(&self, i: usize) -> Option<i64> {
        match self.at(i) {
            Value::Int(v) => Some(*v),
            Value::Text(t) => t.parse().ok(),
            Value::Null => None,
        }
    }
    pub fn bool(&self, i: usize) -> bool {
        self.int(i) != 0
    }
    pub fn text(&self, i: usize) -> String {
        self.opt_text(i).unwrap_or_default()
    }
    pub fn opt_text(&self, i: usize) -> Option<String> {
        match self.at(i) {
            Value::Text(t) => Some(t.clone()),
            Value::Int(v) => Some(v.to_string()),
            Value::Null => None,
        }
    }
}

/// A connection inside a transaction. Statements use `$1`, `$2`, … placeholders; the
/// SQLite backend rewrites them to its `?1` form.
pub trait Conn {
    /// Runs a script of several statements without parameters (migrations).
    fn execute_batch(&mut self, sql: &str) -> Result<()>;
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64>;
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>>;
}

impl dyn Conn + '_ {
    pub fn query_opt(&mut self, sql: &str, params: &[Value]) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    pub fn query_one(&mut self, sql: &str, params: &[Value]) -> Result<Row> {
        self.query_opt(sql, params)?
            .ok_or_else(|| StoreError::Unavailable(format!("query returned no row: {sql}")))
    }
}

/// Whether an operation writes. Reads run on a snapshot and, on SQLite, never wait for
/// the single writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Read,
    Write,
}
