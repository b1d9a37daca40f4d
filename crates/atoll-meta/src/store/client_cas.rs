//! Organizations' certificate authorities for TLS client certificates of their databases.
//! The CA's private key is sealed at rest like the signing keys; its certificate reaches
//! the data nodes inside each database's configuration.

use super::Store;
use crate::error::Result;
use crate::model::ClientCa;
use crate::secrets::SealedRecord;

impl Store {
    /// The organization's CA, its private key opened.
    pub async fn org_client_ca(&self, org_id: &str) -> Result<Option<ClientCa>> {
        let org_id = org_id.to_string();
        let secrets = self.secrets();
        self.read("org_client_ca", move |c| {
            let Some(row) = c.query_opt(
                "SELECT certificate, signing_key FROM org_client_cas WHERE id = $1",
                &[(&org_id).into()],
            )?
            else {
                return Ok(None);
            };
            Ok(Some(ClientCa {
                certificate: row.text(0),
                private_key: secrets.open(SealedRecord::ClientCa(&org_id), &row.text(1))?,
            }))
        })
        .await
    }

    /// Gives the organization `ca` unless it has one already; answers the one it has after
    /// (of two replicas creating one at once, one wins and both use it). A new CA bumps
    /// the organization's databases' configuration versions: nodes must learn it.
    pub async fn ensure_org_client_ca(&self, org_id: &str, ca: ClientCa) -> Result<ClientCa> {
        let org_id = org_id.to_string();
        let secrets = self.secrets();
        self.write("ensure_org_client_ca", move |c| {
            let sealed = secrets.seal(SealedRecord::ClientCa(&org_id), &ca.private_key);
            let inserted = c.execute(
                "INSERT INTO org_client_cas (id, certificate, signing_key, created_at)
                 VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
                &[
                    (&org_id).into(),
                    (&ca.certificate).into(),
                    sealed.into(),
                    crate::now_millis().into(),
                ],
            )?;
            if inserted > 0 {
                c.execute(
                    "UPDATE databases SET config_version = config_version + 1 WHERE org_id = $1",
                    &[(&org_id).into()],
                )?;
                return Ok(ca);
            }
            let row = c
                .query_opt(
                    "SELECT certificate, signing_key FROM org_client_cas WHERE id = $1",
                    &[(&org_id).into()],
                )?
                .ok_or(crate::error::StoreError::NotFound(
                    crate::error::Entity::Organization,
                ))?;
            Ok(ClientCa {
                certificate: row.text(0),
                private_key: secrets.open(SealedRecord::ClientCa(&org_id), &row.text(1))?,
            })
        })
        .await
    }
}
