//! Validation of the names users choose: databases, groups, usernames and organization slugs.

/// Database and group names: lowercase letters, digits and dashes, 1 to 64 characters.
/// They become part of a hostname (`<db>-<org>.<domain>`), hence the DNS-label rules.
pub fn validate_resource_name(kind: &str, name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("{kind} name must not be empty"));
    }
    if name.len() > 64 {
        return Err(format!("{kind} name must be at most 64 characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!(
            "{kind} name may only contain lowercase letters, numbers and dashes"
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(format!("{kind} name must not start or end with a dash"));
    }
    Ok(())
}

/// Usernames double as the slug of the user's personal organization, so they follow the
/// slug rules: lowercase letters, digits and dashes, 1 to 39 characters.
pub fn validate_username(name: &str) -> Result<(), String> {
    validate_slug("username", name)
}

/// Slugs that are path segments of routes beside `/v1/organizations/{org}`: an
/// organization by that name could not be addressed.
const RESERVED_SLUGS: &[&str] = &["stripe-customer"];

/// Organization slugs appear in paths and hostnames.
pub fn validate_slug(kind: &str, slug: &str) -> Result<(), String> {
    if slug.len() > 39 {
        return Err(format!("{kind} must be at most 39 characters"));
    }
    if RESERVED_SLUGS.contains(&slug) {
        return Err(format!("{kind} `{slug}` is reserved: choose another"));
    }
    validate_resource_name(kind, slug)
}

/// Derives an organization slug from a display name: `"My Team"` becomes `my-team`.
pub fn slug_from_name(name: &str) -> String {
    let mut slug = String::new();
    for ch in name.trim().chars() {
        if ch.is_ascii_alphanumeric() {
            slug.push(ch.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    slug.truncate(39);
    while slug.ends_with('-') {
        slug.pop();
    }
    slug
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        assert!(validate_resource_name("group", "default").is_ok());
        assert!(validate_resource_name("group", "my-group-2").is_ok());
        assert!(validate_resource_name("group", &"a".repeat(64)).is_ok());
        assert!(validate_resource_name("group", &"a".repeat(65)).is_err());
        assert!(validate_resource_name("group", "").is_err());
        assert!(validate_resource_name("group", "Default").is_err());
        assert!(validate_resource_name("group", "my_group").is_err());
        assert!(validate_resource_name("group", "-x").is_err());
        assert!(validate_resource_name("group", "a.b").is_err());
    }

    #[test]
    fn route_segments_are_not_slugs() {
        assert!(validate_slug("organization slug", "stripe-customer").is_err());
        assert!(validate_slug("organization slug", "stripe").is_ok());
    }

    #[test]
    fn slugs_from_names() {
        assert_eq!(slug_from_name("My Team"), "my-team");
        assert_eq!(slug_from_name("  Acme, Inc.  "), "acme-inc");
        assert_eq!(slug_from_name("!!!"), "");
    }
}
