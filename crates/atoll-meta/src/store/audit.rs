use super::Store;
use crate::backend::Row;
use crate::error::Result;
use crate::model::{AuditEntry, NewAuditEntry};

const AUDIT_COLUMNS: &str = "id, org_id, code, message, origin, author, data, created_at";

fn audit_from_row(row: &Row) -> AuditEntry {
    AuditEntry {
        id: row.int(0),
        org_id: row.text(1),
        code: row.text(2),
        message: row.text(3),
        origin: row.text(4),
        author: row.text(5),
        data: row.text(6),
        created_at: row.int(7),
    }
}

impl Store {
    /// Appends an entry to an organization's audit log.
    pub async fn record_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry> {
        self.write("record_audit", move |c| {
            let sql = format!(
                "INSERT INTO audit_logs (org_id, code, message, origin, author, data, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {AUDIT_COLUMNS}"
            );
            let row = c.query_one(
                &sql,
                &[
                    entry.org_id.into(),
                    entry.code.into(),
                    entry.message.into(),
                    entry.origin.into(),
                    entry.author.into(),
                    entry.data.into(),
                    crate::now_millis().into(),
                ],
            )?;
            Ok(audit_from_row(&row))
        })
        .await
    }

    /// One page of an organization's audit log, newest first (entries of the same
    /// millisecond in reverse order of recording), and the number of entries in all.
    /// `page` counts from 1; pages past the end are empty.
    pub async fn list_audit(
        &self,
        org_id: &str,
        page: i64,
        page_size: i64,
    ) -> Result<(Vec<AuditEntry>, i64)> {
        let org_id = org_id.to_string();
        let page_size = page_size.max(1);
        let offset = page.max(1).saturating_sub(1).saturating_mul(page_size);
        self.read("list_audit", move |c| {
            let total = c
                .query_one(
                    "SELECT COUNT(*) FROM audit_logs WHERE org_id = $1",
                    &[(&org_id).into()],
                )?
                .int(0);
            let sql = format!(
                "SELECT {AUDIT_COLUMNS} FROM audit_logs WHERE org_id = $1
                 ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3"
            );
            let entries = c
                .query(&sql, &[org_id.into(), page_size.into(), offset.into()])?
                .iter()
                .map(audit_from_row)
                .collect();
            Ok((entries, total))
        })
        .await
    }
}
