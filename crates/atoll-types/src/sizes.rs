//! Sizes with units, as `size_limit` takes them: `10000`, `512kb`, `256mb`, `1GB`.

/// Bytes in `text`: a whole number with an optional unit `b`, `kb`, `mb`, `gb` (any case,
/// powers of 1000), or `kib`, `mib`, `gib` (powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let number: u64 = number.parse().map_err(|_| {
        format!("invalid size {text:?}: expected a number with an optional unit (b, kb, mb, gb)")
    })?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "mb" | "m" => 1_000_000,
        "gb" | "g" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        other => return Err(format!("invalid size unit {other:?}: use b, kb, mb or gb")),
    };
    number
        .checked_mul(multiplier)
        .ok_or_else(|| format!("size {text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn units_in_both_cases() {
        assert_eq!(parse_size("10000"), Ok(10_000));
        assert_eq!(parse_size("1b"), Ok(1));
        assert_eq!(parse_size("512kb"), Ok(512_000));
        assert_eq!(parse_size("256MB"), Ok(256_000_000));
        assert_eq!(parse_size("1gb"), Ok(1_000_000_000));
        assert_eq!(parse_size("1GB"), Ok(1_000_000_000));
        assert_eq!(parse_size("2 mb"), Ok(2_000_000));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        for bad in ["", "mb", "1tb", "-1", "1.5mb", "99999999999999999999"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }
}
