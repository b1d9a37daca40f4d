//! SQL dumps: loading one into a database (seed `dump`), and `GET /dump`.

use crate::error::DataError;

/// Runs an SQL dump in one transaction: all of it, or nothing. The `BEGIN TRANSACTION;` /
/// `COMMIT;` lines `sqlite3 .dump` writes are accepted.
pub fn load_dump(conn: &mut rusqlite::Connection, sql: &str) -> Result<(), DataError> {
    let body = strip_transaction_lines(sql);
    let tx = conn.transaction()?;
    tx.execute_batch(&body)
        .map_err(|e| DataError::BadRequest(format!("the dump failed to load: {e}")))?;
    tx.commit()?;
    Ok(())
}

fn strip_transaction_lines(sql: &str) -> String {
    sql.lines()
        .filter(|line| {
            let l = line.trim().to_ascii_uppercase();
            !matches!(
                l.as_str(),
                "BEGIN TRANSACTION;" | "BEGIN;" | "COMMIT;" | "END TRANSACTION;"
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
