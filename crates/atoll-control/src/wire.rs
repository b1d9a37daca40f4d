//! Store records → wire bodies, with the exact field names of the Turso Platform API.

use atoll_meta::{AuditEntry, Group, Invite, Member, Organization, TokenListing, TokenRestriction};
use atoll_types as wire;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

fn datetime(millis: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// RFC 3339 in UTC, second precision: `2026-11-22T10:00:00Z`.
pub fn rfc3339(millis: i64) -> String {
    let t = datetime(millis);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339).unwrap_or_default()
}

/// RFC 3339 in UTC with milliseconds (`2026-11-22T10:00:00.123Z`): instants of a
/// database's history, which point-in-time restores are asked for to the millisecond.
pub fn rfc3339_millis(millis: i64) -> String {
    datetime(millis).format(&Rfc3339).unwrap_or_default()
}

/// `YYYY-MM-DD`, the date form of token listings.
pub fn date(millis: i64) -> String {
    let t = datetime(millis);
    format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day())
}

pub fn organization(org: &Organization) -> wire::organizations::Organization {
    wire::organizations::Organization {
        id: org.id.clone(),
        name: org.name.clone(),
        slug: org.slug.clone(),
        kind: org.kind.as_str().to_string(),
        overages: org.overages,
        require_mfa: org.require_mfa,
        blocked_reads: org.blocked_reads,
        blocked_writes: org.blocked_writes,
        plan_id: org.plan_id.clone(),
        plan_timeline: org.plan_timeline.clone(),
        platform: String::new(),
        restore_enabled: !crate::config::ControlConfig::is_free_plan(&org.plan_id),
        stripe_id: String::new(),
    }
}

pub fn group(group: &Group) -> wire::groups::Group {
    wire::groups::Group {
        name: group.name.clone(),
        version: group.version.clone(),
        uuid: group.id.clone(),
        locations: group.locations.clone(),
        primary: group.primary_location.clone(),
        delete_protection: group.delete_protection,
        archived: group.archived,
    }
}

pub fn member(member: &Member) -> wire::members::Member {
    wire::members::Member {
        username: member.username.clone(),
        role: member.role,
        email: member.email.clone(),
    }
}

pub fn invite(invite: &Invite) -> wire::members::Invite {
    wire::members::Invite {
        id: invite.id,
        email: invite.email.clone(),
        username: invite.username.clone(),
        role: invite.role,
        organization: invite.org_slug.clone(),
        created_at: rfc3339(invite.created_at),
    }
}

pub fn legacy_invite(invite: &Invite) -> wire::members::LegacyInvite {
    wire::members::LegacyInvite {
        id: invite.id,
        created_at: rfc3339(invite.created_at),
        updated_at: rfc3339(invite.created_at),
        deleted_at: None,
        role: invite.role,
        email: if invite.email.is_empty() {
            invite.username.clone()
        } else {
            invite.email.clone()
        },
        organization_id: invite.org_id.clone(),
        organization: invite.org_slug.clone(),
        accepted: false,
    }
}

/// A token as listings show it; `with_owner` adds the minting user (organization routes).
pub fn api_token(listing: &TokenListing, with_owner: bool) -> wire::tokens::ApiToken {
    let token = &listing.token;
    let scopes = match &token.restriction {
        TokenRestriction::Group { scopes, .. } => Some(scopes.clone()),
        _ => None,
    };
    wire::tokens::ApiToken {
        name: token.name.clone(),
        id: token.id.clone(),
        organization: listing.org_slug.clone(),
        group: listing.group_name.clone(),
        scopes,
        created_at: date(token.created_at),
        last_used_at: token.last_used_at.map(rfc3339),
        expires_at: token.expires_at.map(rfc3339),
        owner: with_owner.then(|| wire::tokens::TokenOwner {
            username: listing.owner_username.clone(),
            email: listing.owner_email.clone(),
        }),
    }
}

pub fn audit_log(entry: &AuditEntry) -> wire::audit::AuditLog {
    wire::audit::AuditLog {
        code: entry.code.clone(),
        message: entry.message.clone(),
        origin: entry.origin.clone(),
        author: entry.author.clone(),
        created_at: rfc3339(entry.created_at),
        // Written by `crate::audit::record` from a JSON value, so it parses.
        data: serde_json::from_str(&entry.data)
            .unwrap_or_else(|_| serde_json::Value::Object(Default::default())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_formats() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20Z");
        assert_eq!(date(1_700_000_000_123), "2023-11-14");
    }
}
