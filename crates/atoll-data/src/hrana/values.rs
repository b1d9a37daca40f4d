//! Hrana values ↔ SQLite values.

use super::HranaError;
use libsql_hrana::proto;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::ToSql;

/// A Hrana value bound as an SQL parameter, without copying text or blobs.
pub(crate) struct SqlArg<'a>(ValueRef<'a>);

impl<'a> SqlArg<'a> {
    pub(crate) fn new(value: &'a proto::Value) -> Result<SqlArg<'a>, HranaError> {
        let value = match value {
            // Only a protobuf `Value` without any field decodes to this.
            proto::Value::None => {
                return Err(HranaError::Protocol("Value type not recognized".into()))
            }
            proto::Value::Null => ValueRef::Null,
            proto::Value::Integer { value } => ValueRef::Integer(*value),
            proto::Value::Float { value } => ValueRef::Real(*value),
            proto::Value::Text { value } => ValueRef::Text(value.as_bytes()),
            proto::Value::Blob { value } => ValueRef::Blob(value),
        };
        Ok(SqlArg(value))
    }
}

impl ToSql for SqlArg<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(self.0))
    }
}

/// The Hrana form of a result value. Infinite reals become NULL: JSON cannot carry them
/// and clients reject the `null` a JSON encoder would write instead (SQLite itself turns
/// NaN into NULL).
pub(crate) fn hrana_value(value: ValueRef<'_>) -> proto::Value {
    match value {
        ValueRef::Null => proto::Value::Null,
        ValueRef::Integer(value) => proto::Value::Integer { value },
        ValueRef::Real(value) if value.is_finite() => proto::Value::Float { value },
        ValueRef::Real(_) => proto::Value::Null,
        ValueRef::Text(bytes) => proto::Value::Text {
            value: String::from_utf8_lossy(bytes).into(),
        },
        ValueRef::Blob(bytes) => proto::Value::Blob {
            value: bytes::Bytes::copy_from_slice(bytes),
        },
    }
}

/// Roughly how many bytes a value takes in a response, to keep responses bounded.
pub(crate) fn response_size(value: &proto::Value) -> usize {
    const OVERHEAD: usize = 32;
    OVERHEAD
        + match value {
            proto::Value::Text { value } => value.len(),
            proto::Value::Blob { value } => value.len() * 4 / 3,
            _ => 0,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_reals_become_null() {
        assert!(matches!(
            hrana_value(ValueRef::Real(f64::INFINITY)),
            proto::Value::Null
        ));
        assert!(matches!(
            hrana_value(ValueRef::Real(1.5)),
            proto::Value::Float { value } if value == 1.5
        ));
    }

    #[test]
    fn values_without_a_type_are_protocol_errors() {
        assert!(matches!(
            SqlArg::new(&proto::Value::None),
            Err(HranaError::Protocol(_))
        ));
    }
}
