//! What kind of statement an SQL text is, read from its leading keywords.
//!
//! SQLite answers most questions about a prepared statement (`readonly()`, parameters,
//! columns), but not whether it is an INSERT (for `last_insert_rowid`), an
//! INSERT/UPDATE/DELETE (for `affected_row_count`), a transaction-control statement (which
//! `block_reads` and read-only tokens still allow), an ATTACH (which must be rewritten
//! before it runs) or a statement that changes the connection itself. A small tokenizer that understands SQLite's quoting and comments is
//! enough to tell, without a full parser.

/// The shape of one statement, as far as Hrana's rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatementKind {
    /// `BEGIN …`: starts a transaction; allowed to read-only callers and under `block_writes`.
    Begin,
    /// `COMMIT`, `END`, `ROLLBACK`, `SAVEPOINT`, `RELEASE`: allowed even under `block_reads`.
    TransactionControl,
    Attach,
    Detach,
    /// `EXPLAIN …`: never runs its statement, so it never writes and may leave
    /// parameters unbound.
    Explain,
    Insert,
    Update,
    Delete,
    /// `VACUUM … INTO 'file'`: writes a file anywhere the server can.
    VacuumInto,
    /// A plain `VACUUM`: the sandbox lets it attach its temporary database while it runs
    /// (the text only grants that narrow exception; the authorizer still decides).
    Vacuum,
    /// `PRAGMA …`: may change settings of the connection.
    Pragma,
    /// `CREATE TEMP …`: an object that lives as long as the connection.
    CreateTemporary,
    /// Anything else: queries, DDL.
    Other,
}

impl StatementKind {
    pub(crate) fn of(sql: &str) -> StatementKind {
        let mut tokens = Tokens::new(sql).filter(|t| !matches!(t.kind, TokenKind::Punct(';')));
        let Some(first) = tokens.next() else {
            return StatementKind::Other;
        };
        let first_word = |word: &str| first.is_word(word);
        if first_word("EXPLAIN") {
            StatementKind::Explain
        } else if first_word("BEGIN") {
            StatementKind::Begin
        } else if ["COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"]
            .iter()
            .any(|w| first_word(w))
        {
            StatementKind::TransactionControl
        } else if first_word("ATTACH") {
            StatementKind::Attach
        } else if first_word("DETACH") {
            StatementKind::Detach
        } else if first_word("PRAGMA") {
            StatementKind::Pragma
        } else if first_word("CREATE") {
            match tokens.next() {
                Some(t) if t.is_word("TEMP") || t.is_word("TEMPORARY") => {
                    StatementKind::CreateTemporary
                }
                _ => StatementKind::Other,
            }
        } else if first_word("VACUUM") {
            if tokens.any(|t| t.is_word("INTO")) {
                StatementKind::VacuumInto
            } else {
                StatementKind::Vacuum
            }
        } else if first_word("WITH") {
            // The statement's verb is the first keyword after the common table
            // expressions, i.e. the first one outside parentheses.
            let mut depth = 0usize;
            for token in tokens {
                match token.kind {
                    TokenKind::Punct('(') => depth += 1,
                    TokenKind::Punct(')') => depth = depth.saturating_sub(1),
                    TokenKind::Word if depth == 0 => {
                        if let Some(kind) = dml_verb(&token) {
                            return kind;
                        }
                    }
                    _ => {}
                }
            }
            StatementKind::Other
        } else {
            dml_verb(&first).unwrap_or(StatementKind::Other)
        }
    }

    /// Whether SQLite's `changes()` describes this statement.
    pub(crate) fn counts_changes(self) -> bool {
        matches!(
            self,
            StatementKind::Insert | StatementKind::Update | StatementKind::Delete
        )
    }

    /// Whether the statement leaves state on the connection that the next client of a
    /// pooled connection must not inherit.
    pub(crate) fn alters_connection(self) -> bool {
        matches!(
            self,
            StatementKind::Pragma | StatementKind::CreateTemporary | StatementKind::Attach
        )
    }

    /// Statements that run for read-only callers whatever `readonly()` says: they only
    /// steer transactions or connections.
    pub(crate) fn is_always_read(self) -> bool {
        matches!(
            self,
            StatementKind::Begin
                | StatementKind::TransactionControl
                | StatementKind::Attach
                | StatementKind::Detach
                | StatementKind::Explain
        )
    }
}

fn dml_verb(token: &Token<'_>) -> Option<StatementKind> {
    if token.is_word("INSERT") || token.is_word("REPLACE") {
        Some(StatementKind::Insert)
    } else if token.is_word("UPDATE") {
        Some(StatementKind::Update)
    } else if token.is_word("DELETE") {
        Some(StatementKind::Delete)
    } else if token.is_word("SELECT") || token.is_word("VALUES") {
        Some(StatementKind::Other)
    } else {
        None
    }
}

/// `ATTACH [DATABASE] <name> AS <alias>`, where `<name>` names another Atoll database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttachRequest {
    /// The database name, unquoted.
    pub name: String,
    /// The alias exactly as written (it may be a quoted identifier).
    pub alias: String,
}

impl AttachRequest {
    /// Reads an ATTACH statement of the only form Atoll accepts: a plain name, no
    /// expressions, no file names.
    pub(crate) fn parse(sql: &str) -> Option<AttachRequest> {
        let mut tokens = Tokens::new(sql);
        if !tokens.next()?.is_word("ATTACH") {
            return None;
        }
        let mut name = tokens.next()?;
        if name.is_word("DATABASE") {
            name = tokens.next()?;
        }
        let name = match name.kind {
            TokenKind::String | TokenKind::QuotedIdentifier => name.unquoted(),
            TokenKind::Word => name.text.to_string(),
            TokenKind::Punct(_) => return None,
        };
        if !tokens.next()?.is_word("AS") {
            return None;
        }
        let alias = tokens.next()?;
        if !matches!(alias.kind, TokenKind::Word | TokenKind::QuotedIdentifier) {
            return None;
        }
        let alias = alias.text.to_string();
        // Only a closing semicolon may follow.
        if tokens.any(|t| !matches!(t.kind, TokenKind::Punct(';'))) {
            return None;
        }
        (!name.is_empty()).then_some(AttachRequest { name, alias })
    }
}

/// Quotes `text` as an SQL string literal.
pub(crate) fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenKind {
    /// A keyword, bare identifier or number.
    Word,
    /// `'…'`
    String,
    /// `"…"`, `` `…` `` or `[…]`
    QuotedIdentifier,
    Punct(char),
}

#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: TokenKind,
    text: &'a str,
}

impl Token<'_> {
    fn is_word(&self, word: &str) -> bool {
        self.kind == TokenKind::Word && self.text.eq_ignore_ascii_case(word)
    }

    fn unquoted(&self) -> String {
        let text = self.text;
        let (open, close) = match text.chars().next() {
            Some('[') => ('[', ']'),
            Some(c) => (c, c),
            None => return String::new(),
        };
        let inner = text
            .strip_prefix(open)
            .map(|t| t.strip_suffix(close).unwrap_or(t))
            .unwrap_or(text);
        if open == '[' {
            inner.to_string()
        } else {
            let doubled: String = [close, close].iter().collect();
            inner.replace(&doubled, &close.to_string())
        }
    }
}

/// SQLite tokens without whitespace and comments.
struct Tokens<'a> {
    rest: &'a str,
}

impl<'a> Tokens<'a> {
    fn new(sql: &'a str) -> Tokens<'a> {
        Tokens { rest: sql }
    }

    fn skip_blanks(&mut self) {
        loop {
            let trimmed = self.rest.trim_start();
            if let Some(comment) = trimmed.strip_prefix("--") {
                self.rest = comment.split_once('\n').map_or("", |(_, after)| after);
            } else if let Some(comment) = trimmed.strip_prefix("/*") {
                self.rest = comment.split_once("*/").map_or("", |(_, after)| after);
            } else {
                self.rest = trimmed;
                return;
            }
        }
    }

    /// The length of a quoted token starting at `rest[0]`, whose quote is escaped by
    /// doubling (unterminated: the rest of the text).
    fn quoted_len(rest: &str, close: char) -> usize {
        let mut chars = rest.char_indices().skip(1).peekable();
        while let Some((i, c)) = chars.next() {
            if c == close {
                if close != ']' && chars.peek().is_some_and(|&(_, next)| next == close) {
                    chars.next();
                    continue;
                }
                return i + c.len_utf8();
            }
        }
        rest.len()
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        self.skip_blanks();
        let first = self.rest.chars().next()?;
        let (kind, len) = match first {
            '\'' => (TokenKind::String, Self::quoted_len(self.rest, '\'')),
            '"' => (
                TokenKind::QuotedIdentifier,
                Self::quoted_len(self.rest, '"'),
            ),
            '`' => (
                TokenKind::QuotedIdentifier,
                Self::quoted_len(self.rest, '`'),
            ),
            '[' => (
                TokenKind::QuotedIdentifier,
                Self::quoted_len(self.rest, ']'),
            ),
            c if is_word_char(c) => (
                TokenKind::Word,
                self.rest
                    .find(|c: char| !is_word_char(c))
                    .unwrap_or(self.rest.len()),
            ),
            c => (TokenKind::Punct(c), c.len_utf8()),
        };
        let (text, rest) = self.rest.split_at(len);
        self.rest = rest;
        Some(Token { kind, text })
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$' || !c.is_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_leading_keywords() {
        use StatementKind::*;
        let cases = [
            ("SELECT 1", Other),
            ("  -- note\n /* c */ insert into t values (1)", Insert),
            ("REPLACE INTO t VALUES (1)", Insert),
            ("update t set x = 1", Update),
            ("DELETE FROM t", Delete),
            (
                "WITH a(x) AS (SELECT 1) INSERT INTO t SELECT x FROM a",
                Insert,
            ),
            ("WITH a AS (DELETE FROM t RETURNING 1) SELECT 1", Other),
            (
                "WITH RECURSIVE c(n) AS (SELECT 1 UNION SELECT n FROM c) DELETE FROM t",
                Delete,
            ),
            ("BEGIN IMMEDIATE", Begin),
            ("begin transaction readonly", Begin),
            ("COMMIT", TransactionControl),
            ("end", TransactionControl),
            ("ROLLBACK TO s", TransactionControl),
            ("SAVEPOINT s", TransactionControl),
            ("RELEASE s", TransactionControl),
            ("ATTACH 'x' AS y", Attach),
            ("DETACH y", Detach),
            ("EXPLAIN QUERY PLAN SELECT 1", Explain),
            ("VACUUM", Vacuum),
            ("VACUUM main INTO '/tmp/x'", VacuumInto),
            ("pragma foreign_keys = off", Pragma),
            ("CREATE TEMP TABLE t (x)", CreateTemporary),
            ("create temporary view v as select 1", CreateTemporary),
            ("CREATE TABLE temp (x)", Other),
            (";; SELECT 1", Other),
            ("", Other),
            ("'INSERT'", Other),
        ];
        for (sql, kind) in cases {
            assert_eq!(StatementKind::of(sql), kind, "{sql}");
        }
    }

    #[test]
    fn attach_statements_parse_only_in_the_plain_form() {
        let parsed = |sql| AttachRequest::parse(sql);
        assert_eq!(
            parsed("ATTACH DATABASE 'sales' AS s"),
            Some(AttachRequest {
                name: "sales".into(),
                alias: "s".into()
            })
        );
        assert_eq!(
            parsed("attach \"sa\"\"les\" as \"my alias\";"),
            Some(AttachRequest {
                name: "sa\"les".into(),
                alias: "\"my alias\"".into()
            })
        );
        assert_eq!(
            parsed("/* x */ ATTACH sales AS s -- done"),
            Some(AttachRequest {
                name: "sales".into(),
                alias: "s".into()
            })
        );
        assert_eq!(parsed("ATTACH 'it''s' AS s").unwrap().name, "it's");
        assert_eq!(parsed("ATTACH 'a' || 'b' AS s"), None);
        assert_eq!(parsed("ATTACH 'a' AS s KEY 'k'"), None);
        assert_eq!(parsed("ATTACH ? AS s"), None);
        assert_eq!(parsed("ATTACH '' AS s"), None);
        assert_eq!(parsed("ATTACH 'a'"), None);
        assert_eq!(parsed("DETACH s"), None);
    }

    #[test]
    fn literals_are_quoted() {
        assert_eq!(quote_literal("it's"), "'it''s'");
    }
}
