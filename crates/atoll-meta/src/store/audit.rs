use super::Store;
use crate::backend::{Row, Value};
use crate::error::Result;
use crate::model::{AuditEntry, NewAuditEntry};

/// Which entries of an audit log to list: every condition given must hold (exact
/// matches; times in milliseconds, `from` included, `to` excluded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    pub code: Option<String>,
    pub author: Option<String>,
    pub origin: Option<String>,
    pub from: Option<i64>,
    pub to: Option<i64>,
}

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
        self.list_audit_matching(org_id, AuditFilter::default(), page, page_size)
            .await
    }

    /// One page of the entries of an organization's audit log that match `filter`,
    /// newest first, and the number of matching entries in all (what pages count).
    pub async fn list_audit_matching(
        &self,
        org_id: &str,
        filter: AuditFilter,
        page: i64,
        page_size: i64,
    ) -> Result<(Vec<AuditEntry>, i64)> {
        let org_id = org_id.to_string();
        let page_size = page_size.max(1);
        let offset = page.max(1).saturating_sub(1).saturating_mul(page_size);
        self.read("list_audit", move |c| {
            // Conditions and their parameters, numbered after the organization's `$1`.
            let mut conditions = String::from("org_id = $1");
            let mut params: Vec<Value> = vec![org_id.into()];
            let mut condition = |sql: &str, value: Value| {
                params.push(value);
                conditions.push_str(&format!(" AND {sql} ${}", params.len()));
            };
            if let Some(code) = filter.code {
                condition("code =", code.into());
            }
            if let Some(author) = filter.author {
                condition("author =", author.into());
            }
            if let Some(origin) = filter.origin {
                condition("origin =", origin.into());
            }
            if let Some(from) = filter.from {
                condition("created_at >=", from.into());
            }
            if let Some(to) = filter.to {
                condition("created_at <", to.into());
            }
            let total = c
                .query_one(
                    &format!("SELECT COUNT(*) FROM audit_logs WHERE {conditions}"),
                    &params,
                )?
                .int(0);
            let n = params.len();
            let sql = format!(
                "SELECT {AUDIT_COLUMNS} FROM audit_logs WHERE {conditions}
                 ORDER BY created_at DESC, id DESC LIMIT ${} OFFSET ${}",
                n + 1,
                n + 2
            );
            params.push(page_size.into());
            params.push(offset.into());
            let entries = c.query(&sql, &params)?.iter().map(audit_from_row).collect();
            Ok((entries, total))
        })
        .await
    }
}
