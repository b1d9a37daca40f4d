//! Splitting SQL text into complete statements, for the shell's multi-line input and for
//! piped scripts sent in batches.
//!
//! A `;` ends a statement only outside quotes, brackets and comments, and not inside the
//! `BEGIN … END` body of a `CREATE TRIGGER`. The rules are those of SQLite's own
//! `sqlite3_complete()` (the state machine below is its table); the safe libsql-rusqlite API
//! does not expose that function, and this crate forbids `unsafe`.

#[derive(Clone, Copy)]
enum Token {
    Semi = 0,
    Space = 1,
    Other = 2,
    Explain = 3,
    Create = 4,
    Temp = 5,
    Trigger = 6,
    End = 7,
}

/// States: 0 nothing yet, 1 after a complete statement, 2 inside a statement, 3 after
/// EXPLAIN, 4 after CREATE, 5 inside a trigger body, 6 after `;` inside a trigger body,
/// 7 after END inside a trigger body. Rows are states, columns tokens in `Token` order.
const TRANSITIONS: [[u8; 8]; 8] = [
    [1, 0, 2, 3, 4, 2, 2, 2],
    [1, 1, 2, 3, 4, 2, 2, 2],
    [1, 2, 2, 2, 2, 2, 2, 2],
    [1, 3, 3, 2, 4, 2, 2, 2],
    [1, 4, 2, 2, 2, 4, 5, 2],
    [6, 5, 5, 5, 5, 5, 5, 5],
    [6, 6, 5, 5, 5, 5, 5, 7],
    [1, 7, 5, 5, 5, 5, 5, 5],
];

/// What [`split`] found in a text.
#[derive(Debug, PartialEq, Eq)]
pub struct Split<'a> {
    /// Each complete statement, with its closing `;`, without surrounding blank lines.
    pub statements: Vec<&'a str>,
    /// Where the text not yet making a complete statement begins.
    pub rest: usize,
    /// The rest is only whitespace and comments.
    pub rest_is_blank: bool,
}

/// Splits `text` into complete statements and an unfinished rest.
pub fn split(text: &str) -> Split<'_> {
    let bytes = text.as_bytes();
    let mut statements = Vec::new();
    let mut state = 0u8;
    let mut start = 0usize;
    let mut i = 0usize;
    while i < bytes.len() {
        let (token, next) = match bytes[i] {
            b';' => (Token::Semi, i + 1),
            b' ' | b'\r' | b'\t' | b'\n' | b'\x0c' => (Token::Space, i + 1),
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                match find(bytes, i + 2, b"*/") {
                    Some(end) => (Token::Space, end + 2),
                    // An unfinished comment: nothing after it can end a statement yet.
                    None => return unfinished(statements, start, false),
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => match find(bytes, i + 2, b"\n") {
                Some(end) => (Token::Space, end + 1),
                None => (Token::Space, bytes.len()),
            },
            quote @ (b'\'' | b'"' | b'`') => match find(bytes, i + 1, &[quote]) {
                Some(end) => (Token::Other, end + 1),
                None => return unfinished(statements, start, false),
            },
            b'[' => match find(bytes, i + 1, b"]") {
                Some(end) => (Token::Other, end + 1),
                None => return unfinished(statements, start, false),
            },
            c if is_id_char(c) => {
                let mut end = i;
                while end < bytes.len() && is_id_char(bytes[end]) {
                    end += 1;
                }
                (keyword(&text[i..end]), end)
            }
            _ => (Token::Other, i + 1),
        };
        let before = state;
        state = TRANSITIONS[state as usize][token as usize];
        if matches!(token, Token::Semi) && state == 1 {
            // `;` with nothing before it (states 0 and 1) is an empty statement: skipped.
            if before > 1 {
                statements.push(text[start..next].trim());
            }
            start = next;
        }
        i = next;
    }
    unfinished(statements, start, state <= 1)
}

fn unfinished<'a>(statements: Vec<&'a str>, rest: usize, blank: bool) -> Split<'a> {
    Split {
        statements,
        rest,
        rest_is_blank: blank,
    }
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from > bytes.len() {
        return None;
    }
    bytes[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| from + at)
}

fn is_id_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

fn keyword(word: &str) -> Token {
    const KEYWORDS: [(&str, Token); 6] = [
        ("create", Token::Create),
        ("trigger", Token::Trigger),
        ("temp", Token::Temp),
        ("temporary", Token::Temp),
        ("end", Token::End),
        ("explain", Token::Explain),
    ];
    KEYWORDS
        .iter()
        .find(|(k, _)| word.eq_ignore_ascii_case(k))
        .map_or(Token::Other, |(_, token)| *token)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `text` holds only complete statements (what the interactive shell waits for).
    fn is_complete(text: &str) -> bool {
        let split = split(text);
        split.rest_is_blank && !split.statements.is_empty()
    }

    #[test]
    fn semicolons_in_strings_and_comments_do_not_end_statements() {
        let split = split(
            "INSERT INTO t VALUES('a;b', \"c;\", [d;]);\n-- not; here\n/* nor; here */ SELECT 1; SELECT",
        );
        assert_eq!(
            split.statements,
            vec![
                "INSERT INTO t VALUES('a;b', \"c;\", [d;]);",
                "-- not; here\n/* nor; here */ SELECT 1;"
            ]
        );
        assert!(!split.rest_is_blank);
        assert!(!is_complete("SELECT 'unfinished;"));
        assert!(is_complete("SELECT 1; -- done\n"));
        assert!(!is_complete("   \n"));
        assert!(split.rest > 0);
    }

    #[test]
    fn trigger_bodies_end_at_end() {
        let sql = "CREATE TEMP TRIGGER tr AFTER INSERT ON t BEGIN\n  INSERT INTO log VALUES(1);\n  UPDATE c SET n = n + 1;\nEND;";
        assert!(!is_complete(&sql[..sql.len() - 5]));
        assert_eq!(split(sql).statements, vec![sql]);
        // A table whose name starts with "trigger" is not a trigger.
        assert_eq!(
            split("CREATE TABLE trigger_log(x); BEGIN; END;").statements,
            vec!["CREATE TABLE trigger_log(x);", "BEGIN;", "END;"]
        );
    }

    #[test]
    fn empty_statements_are_skipped() {
        let split = split(";;SELECT 1;;\n");
        assert_eq!(split.statements, vec!["SELECT 1;"]);
        assert!(split.rest_is_blank);
    }
}
