//! Scopes of group-scoped platform API tokens.

use serde::{Deserialize, Serialize};

/// One permission of a group-scoped token, always within the group it is pinned to.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
pub enum Scope {
    /// Every GET-style route: databases, groups, configuration, usage, instances, locations.
    #[serde(rename = "read")]
    Read,
    #[serde(rename = "db:create")]
    DbCreate,
    #[serde(rename = "db:delete")]
    DbDelete,
    #[serde(rename = "db:configure")]
    DbConfigure,
    #[serde(rename = "db:mint-token")]
    DbMintToken,
    #[serde(rename = "db:rotate-creds")]
    DbRotateCreds,
    #[serde(rename = "group:configure")]
    GroupConfigure,
    #[serde(rename = "group:mint-token")]
    GroupMintToken,
    #[serde(rename = "group:rotate-creds")]
    GroupRotateCreds,
}

impl Scope {
    pub const ALL: [Scope; 9] = [
        Scope::Read,
        Scope::DbCreate,
        Scope::DbDelete,
        Scope::DbConfigure,
        Scope::DbMintToken,
        Scope::DbRotateCreds,
        Scope::GroupConfigure,
        Scope::GroupMintToken,
        Scope::GroupRotateCreds,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::DbCreate => "db:create",
            Scope::DbDelete => "db:delete",
            Scope::DbConfigure => "db:configure",
            Scope::DbMintToken => "db:mint-token",
            Scope::DbRotateCreds => "db:rotate-creds",
            Scope::GroupConfigure => "group:configure",
            Scope::GroupMintToken => "group:mint-token",
            Scope::GroupRotateCreds => "group:rotate-creds",
        }
    }

    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }
}

/// Expands the presets `read-only` and `full-access` and de-duplicates, so a stored token
/// only ever holds individual scopes. An unknown name is returned as the error.
pub fn expand_scopes<S: AsRef<str>>(requested: &[S]) -> Result<Vec<Scope>, String> {
    let mut scopes = Vec::new();
    for name in requested {
        match name.as_ref() {
            "read-only" => scopes.push(Scope::Read),
            "full-access" => scopes.extend(Scope::ALL),
            other => scopes.push(Scope::parse(other).ok_or_else(|| other.to_string())?),
        }
    }
    scopes.sort();
    scopes.dedup();
    Ok(scopes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_expand_to_individual_scopes() {
        assert_eq!(expand_scopes(&["read-only"]).unwrap(), vec![Scope::Read]);
        assert_eq!(
            expand_scopes(&["full-access"]).unwrap(),
            Scope::ALL.to_vec()
        );
        assert_eq!(
            expand_scopes(&["db:create", "read", "db:create"]).unwrap(),
            vec![Scope::Read, Scope::DbCreate]
        );
        assert_eq!(expand_scopes(&["db:drop"]).unwrap_err(), "db:drop");
    }

    #[test]
    fn names_round_trip_through_serde() {
        for scope in Scope::ALL {
            let json = serde_json::to_string(&scope).unwrap();
            assert_eq!(json, format!("\"{}\"", scope.as_str()));
        }
    }
}
