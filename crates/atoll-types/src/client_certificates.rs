//! TLS client certificates for databases: `POST …/databases/{db}/auth/certificates`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A client certificate for one database, issued by its organization's CA. The private key
/// is shown once and never stored by the server.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatabaseCertificate {
    /// PEM certificate (for client authentication; names the database and its rights).
    pub certificate: String,
    /// PEM private key (PKCS#8) of the certificate.
    pub private_key: String,
    /// PEM certificate of the organization's CA that issued it.
    pub ca_certificate: String,
    /// RFC 3339: the certificate is refused after this.
    pub expires_at: String,
    /// `full-access` or `read-only`.
    pub authorization: String,
}
