//! Output helpers: aligned plain-text tables for people, JSON for scripts.

use serde::Serialize;

/// Prints `rows` under `headers` with columns padded to their widest cell.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    print!("{}", render_table(headers, rows));
}

pub fn render_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(cell.chars().count());
            text.push_str(&" ".repeat(pad));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Prints a value as pretty JSON.
pub fn json<T: Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON output serializes")
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_align() {
        let text = super::render_table(
            &["NAME", "GROUP"],
            &[
                vec!["a-long-name".into(), "default".into()],
                vec!["b".into(), "eu".into()],
            ],
        );
        assert_eq!(
            text,
            "NAME         GROUP\na-long-name  default\nb            eu\n"
        );
    }
}
