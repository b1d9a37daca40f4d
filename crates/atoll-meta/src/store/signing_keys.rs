//! Keeping the signing keys sealed under the current secrets key (see [`crate::secrets`]).

use super::{Backend, Store};
use crate::backend::Conn;
use crate::error::Result;
use crate::secrets::{SealReport, SealedRecord, SecretsKeyring, StoredForm};

/// The tables holding signing keys, and the record each row's key belongs to.
type RecordOf = fn(&str) -> SealedRecord<'_>;

const SIGNING_KEY_TABLES: [(&str, RecordOf); 3] = [
    ("databases", database_record),
    ("org_groups", group_record),
    ("org_client_cas", client_ca_record),
];

fn client_ca_record(id: &str) -> SealedRecord<'_> {
    SealedRecord::ClientCa(id)
}

fn database_record(id: &str) -> SealedRecord<'_> {
    SealedRecord::Database(id)
}

fn group_record(id: &str) -> SealedRecord<'_> {
    SealedRecord::Group(id)
}

impl Store {
    /// Opens every stored signing key and seals again those that are not under the
    /// current secrets key: plaintext from older versions, and values sealed under a
    /// previous key (rotation). Idempotent; safe to run from several processes at once
    /// (a row changed meanwhile, say by a key rotation, is left to its writer).
    ///
    /// Fails, changing nothing, when a value does not open: sealed under a key the keyring
    /// does not hold, or tampered with. So a server given the wrong key refuses to start
    /// rather than failing on each token later.
    ///
    /// On SQLite, once plaintext has been sealed, the file is rewritten and the WAL emptied
    /// so the plaintext does not linger in freed pages.
    pub async fn seal_signing_keys(&self) -> Result<SealReport> {
        let secrets = self.secrets();
        let report = self
            .write("seal_signing_keys", move |c| reseal_all(c, &secrets))
            .await?;
        if report.sealed_plaintext > 0 {
            let backend = std::sync::Arc::clone(&self.backend);
            super::blocking(move || match &*backend {
                Backend::Sqlite(b) => b.erase_replaced_content(),
                // PostgreSQL keeps old row versions until VACUUM reuses their space, and
                // its WAL and base backups hold them for as long as they are kept:
                // docs/SECURITY.md tells the operator to rotate keys that were stored in
                // the clear if those copies may leak.
                Backend::Postgres(_) => Ok(()),
            })
            .await?;
        }
        Ok(report)
    }

    /// The signing key of a database or group exactly as stored (the conformance suite
    /// checks what is at rest).
    #[cfg(feature = "testing")]
    pub(crate) async fn stored_signing_key(&self, table: &'static str, id: &str) -> Result<String> {
        let id = id.to_string();
        self.read("stored_signing_key", move |c| {
            Ok(c.query_opt(
                &format!("SELECT signing_key FROM {table} WHERE id = $1"),
                &[id.into()],
            )?
            .map(|row| row.text(0))
            .unwrap_or_default())
        })
        .await
    }

    /// Writes a stored value as it is, bypassing sealing (the conformance suite plays an
    /// older version or an attacker with write access to the store).
    #[cfg(feature = "testing")]
    pub(crate) async fn overwrite_stored_signing_key(
        &self,
        table: &'static str,
        id: &str,
        stored: &str,
    ) -> Result<()> {
        let (id, stored) = (id.to_string(), stored.to_string());
        self.write("overwrite_stored_signing_key", move |c| {
            c.execute(
                &format!("UPDATE {table} SET signing_key = $2 WHERE id = $1"),
                &[id.into(), stored.into()],
            )?;
            Ok(())
        })
        .await
    }
}

fn reseal_all(c: &mut dyn Conn, secrets: &SecretsKeyring) -> Result<SealReport> {
    let mut report = SealReport::default();
    for (table, record_of) in SIGNING_KEY_TABLES {
        let rows = c.query(
            &format!("SELECT id, signing_key FROM {table} WHERE signing_key <> '' ORDER BY id"),
            &[],
        )?;
        for row in rows {
            let (id, stored) = (row.text(0), row.text(1));
            let record = record_of(&id);
            // Every value is opened, resealed or not: a key that cannot open one must
            // stop the start-up here.
            let plaintext = secrets.open(record, &stored)?;
            if !secrets.needs_resealing(&stored) {
                report.unchanged += 1;
                continue;
            }
            let changed = c.execute(
                &format!("UPDATE {table} SET signing_key = $2 WHERE id = $1 AND signing_key = $3"),
                &[
                    id.as_str().into(),
                    secrets.seal(record, &plaintext).into(),
                    stored.as_str().into(),
                ],
            )?;
            match (changed, StoredForm::of(&stored)) {
                (0, _) => report.unchanged += 1,
                (_, StoredForm::Plaintext) => report.sealed_plaintext += 1,
                _ => report.resealed += 1,
            }
        }
    }
    Ok(report)
}
