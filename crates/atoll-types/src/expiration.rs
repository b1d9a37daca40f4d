//! The expiration grammar shared by platform API tokens and database tokens.
//!
//! `never`, `none` and `default` mean "does not expire"; otherwise a sequence of
//! `<number><unit>` with units `w`, `d`, `h`, `m`, `s` (for example `2w1d30m`, `7d3h2m1s`).

/// Seconds until expiry, or `None` for a token that never expires.
pub fn parse_expiration(text: &str) -> Result<Option<u64>, InvalidExpiration> {
    let text = text.trim();
    if matches!(text, "never" | "none" | "default" | "") {
        return Ok(None);
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for ch in text.chars() {
        if let Some(digit) = ch.to_digit(10) {
            let current = number.unwrap_or(0);
            number = Some(
                current
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(digit)))
                    .ok_or(InvalidExpiration)?,
            );
            continue;
        }
        let unit_seconds = match ch {
            'w' => 7 * 24 * 3600,
            'd' => 24 * 3600,
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(InvalidExpiration),
        };
        let count = number.take().ok_or(InvalidExpiration)?;
        total = count
            .checked_mul(unit_seconds)
            .and_then(|s| total.checked_add(s))
            .ok_or(InvalidExpiration)?;
    }
    if number.is_some() || total == 0 {
        // A trailing number without a unit, or a zero lifetime, is a mistake, not a token
        // that expires at once.
        return Err(InvalidExpiration);
    }
    Ok(Some(total))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidExpiration;

impl std::fmt::Display for InvalidExpiration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Invalid expiration format")
    }
}

impl std::error::Error for InvalidExpiration {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse_expiration("never"), Ok(None));
        assert_eq!(parse_expiration("none"), Ok(None));
        assert_eq!(parse_expiration("default"), Ok(None));
        assert_eq!(parse_expiration("2w"), Ok(Some(14 * 86400)));
        assert_eq!(parse_expiration("2w1d30m"), Ok(Some(15 * 86400 + 1800)));
        assert_eq!(
            parse_expiration("7d3h2m1s"),
            Ok(Some(7 * 86400 + 3 * 3600 + 121))
        );
        assert_eq!(parse_expiration("5m"), Ok(Some(300)));
    }

    #[test]
    fn refuses_everything_else() {
        for bad in [
            "5",
            "d",
            "1y",
            "-1d",
            "1d2",
            "0d",
            "1.5h",
            "99999999999999999999w",
        ] {
            assert_eq!(parse_expiration(bad), Err(InvalidExpiration), "{bad}");
        }
    }
}
