//! The statement generator of `atoll fuzz-sql`: SQL that is mostly valid for the schema the
//! case has built so far (so it reaches the engine's execution, not only its parser), with
//! values of hostile sizes and shapes where the engine's C code computes lengths, offsets,
//! dimensions and allocations from them.
//!
//! Everything random comes from one seeded generator, so a seed gives the same statements
//! again (as long as the same statements succeed: the schema the generator works from is
//! read back from the database after every statement that may change it).
//!
//! Statements are single-line: `current-case.sql` holds one statement per line.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use std::sync::Arc;

/// A function of the engine (`PRAGMA function_list`).
#[derive(Debug, Clone)]
pub struct Function {
    pub name: String,
    /// Its number of arguments; -1 for any.
    pub narg: i32,
    /// `s` scalar, `a` aggregate, `w` window.
    pub kind: char,
}

/// What the generator knows of the database (read back from `sqlite_schema`).
#[derive(Debug, Clone, Default)]
pub struct Schema {
    pub tables: Vec<Table>,
    pub indexes: Vec<Index>,
    pub triggers: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    /// `main` or `temp`.
    pub database: String,
    pub kind: TableKind,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    Plain,
    View,
    Fts3,
    Fts5,
    Rtree,
    Geopoly,
    /// Another virtual table (none a tenant may create; kept for completeness).
    OtherVirtual,
}

#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// The declared type, as written.
    pub ty: String,
    /// A hidden column of a virtual table (fts5's table-named column and `rank`).
    pub hidden: bool,
}

impl Column {
    /// The vector element type and dimensions of a `F32_BLOB(3)`-like column.
    fn vector(&self) -> Option<(VectorType, i64)> {
        let ty = self.ty.to_ascii_uppercase();
        let (base, rest) = ty.split_once('(')?;
        let vt = VectorType::of_column(base.trim())?;
        let dims = rest.trim_end_matches(')').trim().parse().ok()?;
        Some((vt, dims))
    }
}

#[derive(Debug, Clone)]
pub struct Index {
    pub name: String,
    pub table: String,
    /// `CREATE INDEX … (libsql_vector_idx(column …))`.
    pub vector: bool,
}

/// One generated statement and what the runner must know to run it.
#[derive(Debug, Clone)]
pub struct Statement {
    pub sql: String,
    /// Plain `VACUUM`: run under `Control::vacuum`, as the node does.
    pub vacuum: bool,
    /// It may change the schema: read it back after.
    pub changes_schema: bool,
    /// Prepared afresh, never from the statement cache: pragmas and EXPLAIN, as the node
    /// prepares them.
    pub pragma: bool,
}

impl Statement {
    fn new(sql: String) -> Statement {
        Statement {
            sql,
            vacuum: false,
            changes_schema: false,
            pragma: false,
        }
    }

    fn schema(sql: String) -> Statement {
        Statement {
            changes_schema: true,
            ..Statement::new(sql)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum VectorType {
    F32,
    F64,
    F16,
    Fb16,
    F8,
    F1bit,
}

impl VectorType {
    const ALL: [VectorType; 6] = [
        VectorType::F32,
        VectorType::F64,
        VectorType::F16,
        VectorType::Fb16,
        VectorType::F8,
        VectorType::F1bit,
    ];

    fn of_column(base: &str) -> Option<VectorType> {
        Some(match base {
            "F32_BLOB" | "FLOAT32" => VectorType::F32,
            "F64_BLOB" | "FLOAT64" => VectorType::F64,
            "F16_BLOB" | "FLOAT16" => VectorType::F16,
            "FB16_BLOB" | "FLOATB16" => VectorType::Fb16,
            "F8_BLOB" | "FLOAT8" => VectorType::F8,
            "F1BIT_BLOB" | "FLOAT1BIT" => VectorType::F1bit,
            _ => return None,
        })
    }

    fn column_types(self) -> &'static [&'static str] {
        match self {
            VectorType::F32 => &["F32_BLOB", "FLOAT32"],
            VectorType::F64 => &["F64_BLOB", "FLOAT64"],
            VectorType::F16 => &["F16_BLOB", "FLOAT16"],
            VectorType::Fb16 => &["FB16_BLOB", "FLOATB16"],
            VectorType::F8 => &["F8_BLOB", "FLOAT8"],
            VectorType::F1bit => &["F1BIT_BLOB", "FLOAT1BIT"],
        }
    }

    fn function(self) -> &'static str {
        match self {
            VectorType::F32 => "vector32",
            VectorType::F64 => "vector64",
            VectorType::F16 => "vector16",
            VectorType::Fb16 => "vectorb16",
            VectorType::F8 => "vector8",
            VectorType::F1bit => "vector1bit",
        }
    }
}

/// Crashes the fuzzer found that the engine does not fix yet (each has a case in
/// `fuzz/sql-crashes/`): the generator keeps out of them, so a campaign finds new crashes
/// instead of the same one every few seconds. A function and the fewest arguments to call
/// it with. Remove an entry once the engine's patch fixes it: the corpus test and
/// `engine_crashes.rs` guard it from then on.
const KNOWN_CRASHES: &[(&str, i32)] = &[
    // Fixed (vendor/README.md), kept as an example: `SELECT libsql_vector_idx()` read
    // `argv[0]` of a call without arguments (SIGSEGV, `libsqlVectorIdx`).
    // ("libsql_vector_idx", 1),
];

/// `SELECT k FROM vector_top_k(…)`: reading a hidden parameter column (`idx`, `vector`,
/// `k`) of the search indexes its result array at -3..-1 (`vectorVtabColumn`), before the
/// array when the table has no rowid (SIGSEGV). Fixed in the engine (`vendor/README.md`): off, so
/// campaigns check the fix.
const AVOID_VECTOR_TOP_K_HIDDEN_COLUMNS: bool = false;

/// A foreign key whose parent is a shadow table of an fts5 table (`REFERENCES f_data`):
/// fts5 writes the shadow table with a nested statement, which then needs a statement
/// savepoint; `sqlite3VtabSavepoint` calls fts5's xSavepoint, which flushes to the shadow
/// table again with another nested statement, and so on until the stack overflows
/// (`fts5SavepointMethod` → `sqlite3Fts5FlushToDisk` → `fts5StorageSaveTotals` →
/// `fts5DataWrite`; SIGSEGV on the guard page). Fixed in the engine (`vendor/README.md`): off, so
/// campaigns check the fix.
const AVOID_FOREIGN_KEYS_TO_FTS5_SHADOW_TABLES: bool = false;

/// A DiskANN node's neighbour count is read from its blob and trusted
/// (`nodeBinEdges`): `UPDATE <index>_shadow SET data = randomblob(length(data))`, then a
/// search, reads neighbours far past the node's buffer (`nodeBinEdge` from
/// `diskAnnSearchInternal`, SIGSEGV). Fixed in the engine (`vendor/README.md`): off, so
/// campaigns check the fix.
const AVOID_WRITES_TO_VECTOR_INDEX_TABLES: bool = false;

/// The tables of a vector index: its graph and the parameters of every index.
fn is_vector_index_table(name: &str) -> bool {
    name.ends_with("_shadow")
}

/// EXPLAIN is prepared afresh, never taken from the statement cache, as the node does since
/// an `EXPLAIN` of a write, cached and run again after the table it names was dropped,
/// listed the freed `Table`'s name (EXPLAIN never runs `OP_Transaction`, so the schema
/// change goes unnoticed: `sqlite3VdbeList` → `displayP4`, `P4_TABLE`; SIGSEGV).
const EXPLAIN_UNCACHED: bool = true;

/// Integers around the limits C code computes sizes, offsets and counts with.
const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "8",
    "16",
    "100",
    "255",
    "256",
    "1000",
    "4096",
    "65535",
    "65536",
    "65537",
    "1000000",
    "536870913",
    "1000000000",
    "2147483647",
    "2147483648",
    "2147483649",
    "-2147483648",
    "-2147483649",
    "4294967295",
    "4294967296",
    "4294967297",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "0x7fffffffffffffff",
    "0xffffffffffffffff",
    "-0",
];

/// Floats: huge, tiny, infinite (`1e999`), beyond `f32`, and the edges of `i64`.
const FLOATS: &[&str] = &[
    "0.0",
    "-0.0",
    "0.5",
    "1.5",
    "-1.5",
    "1e308",
    "-1e308",
    "1e999",
    "-1e999",
    "4.9e-324",
    "2.2250738585072014e-308",
    "3.4028235e38",
    "3.5e38",
    "1e-45",
    "1e9",
    "1e18",
    "9.2233720368547758e18",
    "1e19",
    "-9.3e18",
    "(1e999 - 1e999)",
];

/// Sizes for lengths, widths, counts and offsets.
const SIZES: &[i64] = &[
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    9,
    16,
    31,
    32,
    33,
    64,
    255,
    256,
    1024,
    4095,
    4096,
    4097,
    65535,
    65536,
    65537,
    1 << 20,
    (1 << 24) + 1,
    (32 << 20) - 1,
    32 << 20,
    (32 << 20) + 1,
    (1 << 29) + 1,
    1_000_000_000,
    (1 << 31) - 1,
    1 << 31,
    (1 << 31) + 1,
    (1 << 32) + 1,
    i64::MAX,
    -1,
    -(1 << 31),
    i64::MIN,
];

const STRINGS: &[&str] = &[
    "''",
    "'x'",
    "'abc'",
    "'hello world'",
    "'NaN'",
    "'inf'",
    "'-inf'",
    "'1e999'",
    "'  12  '",
    "'0x10'",
    "'%'",
    "'_'",
    "'\\'",
    "'é'",
    "'日本語'",
    "'\u{1F600}'",
    "'a''b'",
    "'%s%s%s%n'",
    "char(0)",
    "char(0, 65, 0)",
    "char(1114111)",
    "char(55296)",
    "char(-1)",
    "cast(x'ff' AS TEXT)",
    "cast(x'c0af' AS TEXT)",
    "cast(x'f4908080' AS TEXT)",
    "cast(x'e282' AS TEXT)",
];

const JSON_TEXTS: &[&str] = &[
    "'{}'",
    "'[]'",
    "'null'",
    "'{\"a\":1,\"b\":[1,2,{\"c\":null}]}'",
    "'[1,2.5,\"x\",true,false,null]'",
    "'{\"a\":{\"a\":{\"a\":{\"a\":[[[[1]]]]}}}}'",
    "'\"str\"'",
    "'1e999'",
    "'-0'",
    "'{\"a\":'",
    "'[1,2'",
    "'{\"a\" 1}'",
    "'{a:1}'",
    "'[1,]'",
    "'[\"\\u00'",
    "'\"\\ud800\"'",
    "'{\"\":\"\"}'",
    "'[Infinity,NaN,-Infinity]'",
    "'{\"a\":1,\"a\":2}'",
    "'  [ 1 , 2 ]  '",
    "'/* c */ [1]'",
    "'[0x1f, .5, +1, 1.]'",
    "'{''a'':1}'",
];

const JSON_PATHS: &[&str] = &[
    "'$'",
    "'$.a'",
    "'$.a.b'",
    "'$.b[2]'",
    "'$.b[2].c'",
    "'$[0]'",
    "'$[1]'",
    "'$[#]'",
    "'$[#-1]'",
    "'$[#-2147483648]'",
    "'$[1000000000]'",
    "'$[2147483648]'",
    "'$[-1]'",
    "'$.\"a b\"'",
    "'$.a[#]'",
    "''",
    "'a'",
    "'$['",
    "'$.'",
    "'$**'",
    "'$[0][0][0][0]'",
    "'$.a.a.a.a[0][0][0][0]'",
    "'$[9223372036854775807]'",
];

const MALFORMED_VECTORS: &[&str] = &[
    "'[1,2'",
    "'[]'",
    "'[1e999]'",
    "'[-1e999, 1]'",
    "'[nan]'",
    "'[NaN, 1]'",
    "'[inf]'",
    "'['",
    "']'",
    "'[,]'",
    "'[1,,2]'",
    "'[ 1 , 2 ]'",
    "'[1;2]'",
    "'[\"a\"]'",
    "'[[1]]'",
    "''",
    "'1,2,3'",
    "'[-]'",
    "'[1e-999]'",
    "'[0x10]'",
    "'[1 2 3]'",
    "'[3.5e38, -3.5e38]'",
    "'[1e-46]'",
    "x''",
    "x'00'",
    "x'01'",
    "x'02'",
    "x'03'",
    "x'04'",
    "x'05'",
    "x'06'",
    "x'07'",
    "x'0000803f'",
    "x'0000803f01'",
    "x'0000803f02'",
    "x'0000803f03'",
    "x'0000803f04'",
    "x'0000803f0005'",
    "x'0000803f06'",
    "x'000000000000f03f02'",
    "x'ffffffff'",
    "x'ff0000000003'",
    "x'ff000000000000000005'",
    // One element longer than the parser's 1,024-character buffer.
    "('[' || printf('%.*c', 1100, '1') || ']')",
    "('[1,' || printf('%.*c', 1025, '2') || ',3]')",
    "NULL",
    "1",
    "1.5",
];

const COLLATIONS: &[&str] = &["BINARY", "NOCASE", "RTRIM"];

const PLAIN_TYPES: &[&str] = &[
    "INTEGER",
    "INT",
    "TEXT",
    "BLOB",
    "REAL",
    "NUMERIC",
    "ANY",
    "",
    "VARCHAR(10)",
    "DOUBLE PRECISION",
    "BOOLEAN",
    "DATETIME",
];

/// Dimensions of vector columns: mostly small (so inserts match them), sometimes the
/// limits.
const DIMS: &[i64] = &[
    1, 2, 3, 3, 3, 4, 4, 8, 8, 16, 64, 0, 65535, 65536, 65537, 100000, 2147483647, -1,
];

/// Pragmas: reporting ones, connection settings, the writing ones a full-access token may
/// run, and some the sandbox refuses (the authorizer's answer is part of what runs).
const PRAGMAS: &[&str] = &[
    "PRAGMA integrity_check",
    "PRAGMA integrity_check(1)",
    "PRAGMA integrity_check(2147483647)",
    "PRAGMA quick_check",
    "PRAGMA quick_check(-1)",
    "PRAGMA foreign_key_check",
    "PRAGMA foreign_key_list",
    "PRAGMA function_list",
    "PRAGMA module_list",
    "PRAGMA pragma_list",
    "PRAGMA collation_list",
    "PRAGMA compile_options",
    "PRAGMA data_version",
    "PRAGMA freelist_count",
    "PRAGMA page_count",
    "PRAGMA table_list",
    "PRAGMA foreign_keys = ON",
    "PRAGMA foreign_keys = OFF",
    "PRAGMA defer_foreign_keys = ON",
    "PRAGMA recursive_triggers = ON",
    "PRAGMA recursive_triggers = OFF",
    "PRAGMA case_sensitive_like = ON",
    "PRAGMA case_sensitive_like = OFF",
    "PRAGMA reverse_unordered_selects = ON",
    "PRAGMA automatic_index = OFF",
    "PRAGMA analysis_limit = 1",
    "PRAGMA analysis_limit = 0",
    "PRAGMA analysis_limit = -1",
    "PRAGMA analysis_limit = 2147483648",
    "PRAGMA optimize",
    "PRAGMA optimize(0xfffe)",
    "PRAGMA optimize(-1)",
    "PRAGMA user_version = 2147483648",
    "PRAGMA user_version = -1",
    "PRAGMA application_id = 9223372036854775807",
    "PRAGMA incremental_vacuum",
    "PRAGMA incremental_vacuum(2147483647)",
    "PRAGMA incremental_vacuum(-1)",
    "PRAGMA legacy_alter_table = ON",
    "PRAGMA legacy_alter_table = OFF",
    "PRAGMA cell_size_check",
    "PRAGMA journal_mode",
    "PRAGMA page_size",
    "PRAGMA max_page_count",
    "PRAGMA cache_size",
    "PRAGMA encoding",
    "PRAGMA schema_version",
    "PRAGMA hard_heap_limit",
    "PRAGMA hard_heap_limit = 1",
    "PRAGMA soft_heap_limit = 1",
    "PRAGMA threads = 8",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA writable_schema = ON",
    "PRAGMA schema_version = 1",
    "PRAGMA database_list",
    "PRAGMA mmap_size = 1000000000",
    "PRAGMA cache_size = -2000000",
    "PRAGMA max_page_count = 1",
    "PRAGMA wal_checkpoint(TRUNCATE)",
    "PRAGMA query_only = OFF",
    "PRAGMA temp_store_directory = '/tmp'",
    "PRAGMA trusted_schema = ON",
    "PRAGMA secure_delete = ON",
];

/// Table-valued pragma functions and their columns.
const PRAGMA_FUNCTIONS: &[(&str, &[&str], bool)] = &[
    (
        "pragma_table_info",
        &["cid", "name", "type", "notnull", "dflt_value", "pk"],
        true,
    ),
    (
        "pragma_table_xinfo",
        &[
            "cid",
            "name",
            "type",
            "notnull",
            "dflt_value",
            "pk",
            "hidden",
        ],
        true,
    ),
    (
        "pragma_index_list",
        &["seq", "name", "unique", "origin", "partial"],
        true,
    ),
    ("pragma_index_info", &["seqno", "cid", "name"], true),
    (
        "pragma_index_xinfo",
        &["seqno", "cid", "name", "desc", "coll", "key"],
        true,
    ),
    (
        "pragma_foreign_key_list",
        &[
            "id",
            "seq",
            "table",
            "from",
            "to",
            "on_update",
            "on_delete",
            "match",
        ],
        true,
    ),
    (
        "pragma_foreign_key_check",
        &["table", "rowid", "parent", "fkid"],
        false,
    ),
    ("pragma_integrity_check", &["integrity_check"], false),
    ("pragma_quick_check", &["quick_check"], false),
    (
        "pragma_function_list",
        &["name", "builtin", "type", "enc", "narg", "flags"],
        false,
    ),
    ("pragma_module_list", &["name"], false),
    ("pragma_pragma_list", &["name"], false),
    ("pragma_collation_list", &["seq", "name"], false),
    (
        "pragma_table_list",
        &["schema", "name", "type", "ncol", "wr", "strict"],
        false,
    ),
];

const JSON_EACH_COLUMNS: &[&str] = &[
    "key", "value", "type", "atom", "id", "parent", "fullkey", "path",
];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Select,
    Functions,
    Insert,
    Update,
    Delete,
    CreateTable,
    CreateIndex,
    CreateVirtual,
    CreateView,
    CreateTrigger,
    Alter,
    Drop,
    Transaction,
    Maintenance,
    Pragma,
    VectorSearch,
    FullText,
    Rtree,
    Printf,
    CorruptVectorIndex,
}

const KINDS: &[(u32, Kind)] = &[
    (16, Kind::Select),
    (14, Kind::Functions),
    (16, Kind::Insert),
    (5, Kind::Update),
    (3, Kind::Delete),
    (6, Kind::CreateTable),
    (5, Kind::CreateIndex),
    (4, Kind::CreateVirtual),
    (2, Kind::CreateView),
    (3, Kind::CreateTrigger),
    (3, Kind::Alter),
    (2, Kind::Drop),
    (4, Kind::Transaction),
    (2, Kind::Maintenance),
    (4, Kind::Pragma),
    (8, Kind::VectorSearch),
    (4, Kind::FullText),
    (2, Kind::Rtree),
    (3, Kind::Printf),
    (5, Kind::CorruptVectorIndex),
];

/// What an expression may refer to.
#[derive(Debug, Clone, Default)]
struct Scope {
    /// Column references, written as they must appear (`t."c0"`, `new."c1"`, `value`).
    refs: Vec<String>,
    /// Aggregates are allowed (a result column, HAVING).
    aggregates: bool,
}

impl Scope {
    fn of(refs: Vec<String>) -> Scope {
        Scope {
            refs,
            aggregates: false,
        }
    }
}

pub struct Generator {
    rng: StdRng,
    functions: Arc<[Function]>,
    scalar: Vec<usize>,
    aggregate: Vec<usize>,
    window: Vec<usize>,
    schema: Schema,
    /// The table being generated has its PRIMARY KEY (a second one is an error the parser
    /// catches: nothing runs).
    primary_key_written: bool,
}

/// How a function of `PRAGMA function_list` is called: `->` and `->>` are listed as
/// functions too, and `current_time` and the like are keywords without parentheses.
fn call_name(name: &str) -> String {
    if name.eq_ignore_ascii_case("current_time")
        || name.eq_ignore_ascii_case("current_date")
        || name.eq_ignore_ascii_case("current_timestamp")
    {
        // `"current_time"(…)` calls the function, not the keyword.
        return format!("\"{name}\"");
    }
    ident(name)
}

/// A quoted identifier when it needs quotes.
pub fn ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl Generator {
    pub fn new(rng: StdRng, functions: Arc<[Function]>) -> Generator {
        let by_kind = |kind: char| -> Vec<usize> {
            functions
                .iter()
                .enumerate()
                .filter(|(_, f)| f.kind == kind)
                .map(|(i, _)| i)
                .collect()
        };
        let scalar = by_kind('s');
        let aggregate = by_kind('a');
        let window = by_kind('w');
        Generator {
            rng,
            functions,
            scalar,
            aggregate,
            window,
            schema: Schema::default(),
            primary_key_written: false,
        }
    }

    /// The generator's randomness, for the runner's own choices.
    pub fn rng(&mut self) -> &mut StdRng {
        &mut self.rng
    }

    pub fn set_schema(&mut self, schema: Schema) {
        self.schema = schema;
    }

    /// How many statements the next case runs.
    pub fn statements_per_case(&mut self) -> usize {
        self.rng.gen_range(20..=60)
    }

    // ---- helpers --------------------------------------------------------------------

    fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p)
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        *items.choose(&mut self.rng).expect("a non-empty list")
    }

    fn pick_string(&mut self, items: &[String]) -> String {
        items.choose(&mut self.rng).cloned().unwrap_or_default()
    }

    fn weighted<T: Copy>(&mut self, items: &[(u32, T)]) -> T {
        let total: u32 = items.iter().map(|(w, _)| w).sum();
        let mut at = self.rng.gen_range(0..total);
        for (weight, item) in items {
            if at < *weight {
                return *item;
            }
            at -= weight;
        }
        items[items.len() - 1].1
    }

    fn size(&mut self) -> i64 {
        // Mostly small: the big ones cost time (and are bounded by the length limit).
        if self.chance(0.7) {
            self.pick(&SIZES[..22])
        } else {
            self.pick(SIZES)
        }
    }

    fn int(&mut self) -> String {
        if self.chance(0.4) {
            self.rng.gen_range(-5..50).to_string()
        } else {
            self.pick(INTS).to_string()
        }
    }

    fn tables(&self, pred: impl Fn(&Table) -> bool) -> Vec<Table> {
        self.schema
            .tables
            .iter()
            .filter(|t| pred(t))
            .cloned()
            .collect()
    }

    fn any_table(&mut self) -> Option<Table> {
        self.schema.tables.choose(&mut self.rng).cloned()
    }

    /// A table to write to: plain tables, mostly, then virtual ones, then views (which
    /// need INSTEAD OF triggers) and shadow tables (refused in defensive mode).
    fn writable_table(&mut self) -> Option<Table> {
        let plain = self.tables(|t| t.kind == TableKind::Plain && !t.name.contains('_'));
        if !plain.is_empty() && self.chance(0.75) {
            return plain.choose(&mut self.rng).cloned();
        }
        if AVOID_WRITES_TO_VECTOR_INDEX_TABLES {
            let safe = self.tables(|t| !is_vector_index_table(&t.name));
            return safe.choose(&mut self.rng).cloned();
        }
        self.any_table()
    }

    /// Writes the tables a DiskANN index keeps its graph in (`<index>_shadow`, one blob a
    /// node) and its parameters (`libsql_vector_meta_shadow`): plain tables, so a tenant
    /// may write them, and an uploaded file carries them too.
    fn corrupt_vector_index(&mut self) -> String {
        if AVOID_WRITES_TO_VECTOR_INDEX_TABLES {
            return self.vector_search();
        }
        let indexes = self.vector_indexes();
        let Some(index) = indexes.choose(&mut self.rng).cloned() else {
            return self.vector_search();
        };
        let shadow = ident(&format!("{}_shadow", index.name));
        if self.chance(0.2) {
            let blob = self.blob();
            let metadata = self.pick(&[
                "randomblob(length(metadata))",
                "x''",
                "substr(metadata, 1, length(metadata) - 1)",
                "metadata || x'00'",
            ]);
            let metadata = if self.chance(0.3) {
                blob.as_str()
            } else {
                metadata
            };
            return format!(
                "UPDATE libsql_vector_meta_shadow SET metadata = {metadata} WHERE name = {}",
                literal(&index.name)
            );
        }
        // A node: rowid (8 bytes), neighbour count (2), its vector, then the neighbours.
        let data = match self.rng.gen_range(0..7) {
            0 => "randomblob(length(data))".to_string(),
            1 => format!(
                "substr(data, 1, 8) || x'{}' || substr(data, 11)",
                self.pick(&["ffff", "0001", "4000", "0100", "0000"])
            ),
            2 => "zeroblob(length(data))".to_string(),
            3 => format!("substr(data, 1, {})", self.rng.gen_range(0..64)),
            4 => "data || randomblob(16)".to_string(),
            5 => format!(
                "substr(data, 1, {n}) || randomblob(16) || substr(data, {n} + 17)",
                n = self.rng.gen_range(0..300)
            ),
            _ => {
                "(SELECT data FROM {shadow} ORDER BY random() LIMIT 1)".replace("{shadow}", &shadow)
            }
        };
        let filter = if self.chance(0.5) {
            format!(" WHERE rowid % {} = 0", self.rng.gen_range(1..5))
        } else {
            String::new()
        };
        format!("UPDATE {shadow} SET data = {data}{filter}")
    }

    fn table_name(&mut self) -> String {
        match self.any_table() {
            Some(t) if self.chance(0.9) => t.name,
            _ => format!("t{}", self.rng.gen_range(0..6)),
        }
    }

    /// The parent table of a foreign key: any table, shadow tables included, but for
    /// the known crash of [`AVOID_FOREIGN_KEYS_TO_FTS5_SHADOW_TABLES`].
    fn parent_table(&mut self) -> String {
        let name = self.table_name();
        let fts5_shadow = self
            .schema
            .tables
            .iter()
            .any(|t| t.kind == TableKind::Fts5 && name.starts_with(&format!("{}_", t.name)));
        if AVOID_FOREIGN_KEYS_TO_FTS5_SHADOW_TABLES && fts5_shadow {
            return "t0".into();
        }
        name
    }

    fn qualified(&mut self, table: &Table) -> String {
        if table.database == "temp" && self.chance(0.5) {
            format!("temp.{}", ident(&table.name))
        } else if self.chance(0.1) {
            format!("main.{}", ident(&table.name))
        } else {
            ident(&table.name)
        }
    }

    fn visible_columns(table: &Table) -> Vec<Column> {
        table
            .columns
            .iter()
            .filter(|c| !c.hidden)
            .cloned()
            .collect()
    }

    fn column_refs(table: &Table, alias: Option<&str>) -> Vec<String> {
        let mut refs: Vec<String> = table
            .columns
            .iter()
            .map(|c| match alias {
                Some(a) => format!("{a}.{}", ident(&c.name)),
                None => ident(&c.name),
            })
            .collect();
        if table.kind != TableKind::View {
            refs.push(match alias {
                Some(a) => format!("{a}.rowid"),
                None => "rowid".to_string(),
            });
        }
        refs
    }

    // ---- values ---------------------------------------------------------------------

    /// A hostile value: a literal, a long or big value, a vector, JSON, or NULL.
    fn value(&mut self) -> String {
        match self.rng.gen_range(0..100) {
            0..=19 => self.int(),
            20..=29 => self.pick(FLOATS).to_string(),
            30..=41 => self.pick(STRINGS).to_string(),
            42..=47 => "NULL".to_string(),
            48..=53 => self.blob(),
            54..=59 => {
                let n = self.size();
                format!("printf('%.*c', {n}, 'x')")
            }
            60..=63 => {
                let n = self.size();
                format!("zeroblob({n})")
            }
            64..=66 => {
                let n = self.size();
                format!("randomblob({n})")
            }
            67..=78 => self.vector_value(None),
            79..=88 => self.json_value(),
            89..=93 => format!(
                "{}.{}",
                self.rng.gen_range(-100..100),
                self.rng.gen_range(0..100)
            ),
            _ => literal(&self.word()),
        }
    }

    fn word(&mut self) -> String {
        const WORDS: &[&str] = &[
            "alpha", "beta", "gamma", "delta", "x", "xx", "the", "and", "or", "not", "near", "a",
            "b", "c", "hello", "world", "sqlite", "libsql", "atoll",
        ];
        let n = self.rng.gen_range(1..4);
        (0..n)
            .map(|_| self.pick(WORDS))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn blob(&mut self) -> String {
        let len = match self.rng.gen_range(0..4) {
            0 => self.rng.gen_range(0..4),
            1 => self.rng.gen_range(4..16),
            _ => self.rng.gen_range(16..80),
        };
        let mut bytes: Vec<u8> = (0..len).map(|_| self.rng.gen()).collect();
        if self.chance(0.4) {
            // A vector blob's trailing type byte (and the odd one out).
            bytes.push(self.rng.gen_range(0..9));
        }
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("x'{hex}'")
    }

    /// Text of a vector of `dims` elements (well-formed).
    fn vector_text(&mut self, dims: i64) -> String {
        if dims <= 0 {
            return "'[]'".to_string();
        }
        if dims > 256 {
            // As SQL, not as a 100 kB literal.
            return format!(
                "('[' || replace(printf('%.*c', {}, 'x'), 'x', '0.5,') || '1]')",
                dims - 1
            );
        }
        let elements: Vec<String> = (0..dims)
            .map(|_| match self.rng.gen_range(0..20) {
                0 => self
                    .pick(&["1e38", "-1e38", "3.4e38", "1e-45", "0", "-0", "1e30"])
                    .to_string(),
                1..=4 => self.rng.gen_range(-3..4).to_string(),
                _ => format!("{:.3}", self.rng.gen_range(-10.0f64..10.0)),
            })
            .collect();
        format!("'[{}]'", elements.join(","))
    }

    /// A vector value: of the column's type and size when there is one, often.
    fn vector_value(&mut self, column: Option<(VectorType, i64)>) -> String {
        if self.chance(0.15) {
            return self.pick(MALFORMED_VECTORS).to_string();
        }
        let (vt, dims) = match column {
            Some((vt, dims)) if self.chance(0.85) => (vt, dims.clamp(0, 70000)),
            _ => {
                let vt = self.pick(&VectorType::ALL);
                let dims = if self.chance(0.9) {
                    self.rng.gen_range(0..10)
                } else {
                    self.pick(&[0, 1, 65535, 65536, 65537])
                };
                (vt, dims)
            }
        };
        let text = self.vector_text(dims);
        match self.rng.gen_range(0..10) {
            0 => text,
            1 => format!("vector({text})"),
            _ => format!("{}({text})", vt.function()),
        }
    }

    fn json_value(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0..=4 => self.pick(JSON_TEXTS).to_string(),
            5 => {
                let n = self.pick(&[10, 100, 999, 1000, 1001, 2000, 10000, 100000]);
                let open = self.pick(&["[", "{\"a\":"]);
                if open == "[" {
                    format!("printf('%.*c', {n}, '[')")
                } else {
                    format!("replace(printf('%.*c', {n}, 'x'), 'x', '{open}')")
                }
            }
            6 => {
                let n = self.pick(&[10, 999, 1000, 1001, 5000]);
                format!("(printf('%.*c', {n}, '[') || '1' || printf('%.*c', {n}, ']'))")
            }
            7 => {
                let inner = self.pick(JSON_TEXTS);
                format!("jsonb({inner})")
            }
            8 => {
                let blob = self.blob();
                format!("json({blob})")
            }
            _ => {
                let a = self.value_shallow();
                let b = self.value_shallow();
                match self.rng.gen_range(0..4) {
                    0 => format!("json_array({a}, {b})"),
                    1 => format!("json_object('a', {a}, 'b', {b})"),
                    2 => format!("jsonb_array({a}, {b})"),
                    _ => format!("jsonb_object('k', {a})"),
                }
            }
        }
    }

    /// A value without vectors and JSON (for inside them).
    fn value_shallow(&mut self) -> String {
        match self.rng.gen_range(0..5) {
            0 => self.int(),
            1 => self.pick(FLOATS).to_string(),
            2 => self.pick(STRINGS).to_string(),
            3 => "NULL".to_string(),
            _ => self.blob(),
        }
    }

    // ---- expressions ----------------------------------------------------------------

    fn expr(&mut self, scope: &Scope, depth: u32) -> String {
        if depth >= 4 || self.chance(0.3) {
            return self.leaf(scope);
        }
        let d = depth + 1;
        match self.rng.gen_range(0..100) {
            0..=9 => self.leaf(scope),
            10..=29 => self.call_listed(scope, d),
            30..=39 => {
                let op = self.pick(&[
                    "+", "-", "*", "/", "%", "||", "&", "|", "<<", ">>", "=", "==", "!=", "<>",
                    "<", "<=", ">", ">=", "AND", "OR", "IS", "IS NOT", "->", "->>",
                ]);
                let a = self.expr(scope, d);
                let b = self.expr(scope, d);
                format!("({a} {op} {b})")
            }
            40..=43 => {
                let op = self.pick(&["-", "+", "~", "NOT "]);
                let a = self.expr(scope, d);
                format!("({op}{a})")
            }
            44..=47 => {
                let n = self.rng.gen_range(1..4);
                let mut s = String::from("CASE");
                if self.chance(0.5) {
                    s.push(' ');
                    s.push_str(&self.expr(scope, d));
                }
                for _ in 0..n {
                    let w = self.expr(scope, d);
                    let t = self.expr(scope, d);
                    s.push_str(&format!(" WHEN {w} THEN {t}"));
                }
                if self.chance(0.6) {
                    let e = self.expr(scope, d);
                    s.push_str(&format!(" ELSE {e}"));
                }
                s.push_str(" END");
                s
            }
            48..=51 => {
                let a = self.expr(scope, d);
                let ty = self.pick(&[
                    "INTEGER", "REAL", "TEXT", "BLOB", "NUMERIC", "ANY", "F32_BLOB",
                ]);
                format!("CAST({a} AS {ty})")
            }
            52..=54 => {
                let a = self.expr(scope, d);
                let b = self.expr(scope, d);
                let c = self.expr(scope, d);
                let not = if self.chance(0.3) { "NOT " } else { "" };
                format!("({a} {not}BETWEEN {b} AND {c})")
            }
            55..=58 => {
                let a = self.expr(scope, d);
                if self.chance(0.4) && depth < 2 {
                    let sub = self.select(d + 1, 1);
                    format!("({a} IN ({sub}))")
                } else {
                    let n = self.rng.gen_range(0..5);
                    let list: Vec<String> = (0..n).map(|_| self.expr(scope, d)).collect();
                    format!("({a} IN ({}))", list.join(", "))
                }
            }
            59..=61 if depth < 2 => {
                let sub = self.select(d + 1, 1);
                format!("({sub})")
            }
            62..=63 if depth < 2 => {
                let sub = self.select(d + 1, 0);
                format!("EXISTS ({sub})")
            }
            64..=66 => {
                let a = self.expr(scope, d);
                let c = self.pick(COLLATIONS);
                format!("({a} COLLATE {c})")
            }
            67..=70 => {
                let a = self.expr(scope, d);
                let b = self.like_pattern();
                let op = self.pick(&["LIKE", "GLOB", "NOT LIKE", "LIKE", "NOT GLOB", "MATCH"]);
                if op == "LIKE" && self.chance(0.3) {
                    let e = self.pick(&["'\\'", "'x'", "''", "'ab'", "char(0)"]);
                    format!("({a} LIKE {b} ESCAPE {e})")
                } else {
                    format!("({a} {op} {b})")
                }
            }
            71..=72 => {
                let a = self.expr(scope, d);
                let op = self.pick(&["ISNULL", "NOTNULL", "IS NULL", "IS NOT NULL"]);
                format!("({a} {op})")
            }
            73..=80 => self.curated_call(scope, d),
            81..=85 if scope.aggregates => self.aggregate_call(scope, d),
            86..=88 if scope.aggregates => self.window_call(scope, d),
            89..=92 => {
                let a = self.expr(scope, d);
                let p = self.pick(JSON_PATHS);
                let op = self.pick(&["->", "->>"]);
                format!("({a} {op} {p})")
            }
            _ => self.leaf(scope),
        }
    }

    fn like_pattern(&mut self) -> String {
        if self.chance(0.5) {
            self.pick(&[
                "'%'",
                "'%a%'",
                "'_'",
                "'a%b_c'",
                "'[a-z]*'",
                "'*'",
                "'[]'",
                "'[^'",
                "'%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%%b'",
                "'\\%'",
                "''",
                "'?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*?*x'",
            ])
            .to_string()
        } else {
            self.value()
        }
    }

    fn leaf(&mut self, scope: &Scope) -> String {
        if !scope.refs.is_empty() && self.chance(0.5) {
            return self.pick_ref(scope);
        }
        if self.chance(0.05) {
            return self
                .pick(&["?", "?1", "?999", ":a", "@b", "$c"])
                .to_string();
        }
        self.value()
    }

    fn pick_ref(&mut self, scope: &Scope) -> String {
        scope
            .refs
            .choose(&mut self.rng)
            .cloned()
            .unwrap_or_else(|| "NULL".into())
    }

    /// Arguments of a call of `name`, which takes `narg` (-1: any number).
    fn args(&mut self, name: &str, scope: &Scope, depth: u32, narg: i32) -> Vec<String> {
        let n = if narg < 0 {
            self.rng.gen_range(0..=6)
        } else if self.chance(0.08) {
            (narg + self.pick(&[-1, 1, 2])).max(0)
        } else {
            narg
        };
        let least = KNOWN_CRASHES
            .iter()
            .find(|(function, _)| function.eq_ignore_ascii_case(name))
            .map_or(0, |(_, least)| *least);
        (0..n.max(least)).map(|_| self.expr(scope, depth)).collect()
    }

    /// Any scalar function of the engine, with generated arguments.
    fn call_listed(&mut self, scope: &Scope, depth: u32) -> String {
        let list = if scope.aggregates && self.chance(0.2) {
            &self.aggregate
        } else {
            &self.scalar
        };
        let Some(&index) = list.choose(&mut self.rng) else {
            return self.leaf(scope);
        };
        let function = self.functions[index].clone();
        let args = self.args(&function.name, scope, depth, function.narg);
        format!("{}({})", call_name(&function.name), args.join(", "))
    }

    fn aggregate_call(&mut self, scope: &Scope, depth: u32) -> String {
        let Some(&index) = self.aggregate.choose(&mut self.rng) else {
            return format!("count({})", self.expr(scope, depth));
        };
        let function = self.functions[index].clone();
        let mut args = self.args(&function.name, scope, depth, function.narg);
        if function.narg < 0 && args.is_empty() {
            args.push(self.expr(scope, depth));
        }
        let distinct = if args.len() == 1 && self.chance(0.15) {
            "DISTINCT "
        } else {
            ""
        };
        let mut s = format!(
            "{}({distinct}{}",
            call_name(&function.name),
            args.join(", ")
        );
        if self.chance(0.15) {
            let e = self.expr(scope, depth);
            s.push_str(&format!(" ORDER BY {e}"));
        }
        s.push(')');
        if self.chance(0.15) {
            let e = self.expr(scope, depth);
            s.push_str(&format!(" FILTER (WHERE {e})"));
        }
        s
    }

    /// Whether the engine has a function of this name.
    fn exists(&self, name: &str) -> bool {
        self.functions
            .iter()
            .any(|f| f.name.eq_ignore_ascii_case(name))
    }

    /// One of `names` the engine has (any of them if it has none).
    fn choose_fn(&mut self, names: &[&'static str]) -> &'static str {
        let present: Vec<&'static str> = names.iter().copied().filter(|n| self.exists(n)).collect();
        if present.is_empty() {
            self.pick(names)
        } else {
            self.pick(&present)
        }
    }

    fn window_call(&mut self, scope: &Scope, depth: u32) -> String {
        let call = if self.chance(0.5) && !self.window.is_empty() {
            let index = self.pick(&self.window.clone());
            let function = self.functions[index].clone();
            let args: Vec<String> = match function.name.as_str() {
                "ntile" => vec![self.int()],
                "lag" | "lead" => {
                    let e = self.expr(scope, depth);
                    let mut v = vec![e];
                    if self.chance(0.6) {
                        v.push(self.int());
                    }
                    if self.chance(0.4) {
                        v.push(self.value());
                    }
                    v
                }
                "nth_value" => vec![self.expr(scope, depth), self.int()],
                _ => self.args(&function.name, scope, depth, function.narg),
            };
            format!("{}({})", call_name(&function.name), args.join(", "))
        } else {
            self.aggregate_call(scope, depth)
        };
        let window = self.window_spec(scope, depth);
        format!("{call} OVER ({window})")
    }

    fn window_spec(&mut self, scope: &Scope, depth: u32) -> String {
        let mut parts = Vec::new();
        if self.chance(0.5) {
            parts.push(format!("PARTITION BY {}", self.expr(scope, depth + 1)));
        }
        if self.chance(0.7) {
            let e = self.expr(scope, depth + 1);
            let dir = self.pick(&["", " ASC", " DESC", " NULLS FIRST", " DESC NULLS LAST"]);
            parts.push(format!("ORDER BY {e}{dir}"));
        }
        if self.chance(0.5) {
            let unit = self.pick(&["ROWS", "RANGE", "GROUPS"]);
            // A frame starts anywhere but UNBOUNDED FOLLOWING and ends anywhere but
            // UNBOUNDED PRECEDING (the parser's rule).
            let bound = |g: &mut Generator, unbounded: &str| -> String {
                match g.rng.gen_range(0..4) {
                    0 => unbounded.into(),
                    1 => "CURRENT ROW".into(),
                    2 => format!("{} PRECEDING", g.int()),
                    _ => format!("{} FOLLOWING", g.int()),
                }
            };
            let start = bound(self, "UNBOUNDED PRECEDING");
            let end = bound(self, "UNBOUNDED FOLLOWING");
            let exclude = self.pick(&[
                "",
                " EXCLUDE NO OTHERS",
                " EXCLUDE CURRENT ROW",
                " EXCLUDE GROUP",
                " EXCLUDE TIES",
            ]);
            parts.push(format!("{unit} BETWEEN {start} AND {end}{exclude}"));
        }
        parts.join(" ")
    }

    /// Calls chosen by hand: vectors, JSON, and the functions that take sizes and offsets.
    fn curated_call(&mut self, scope: &Scope, depth: u32) -> String {
        match self.rng.gen_range(0..22) {
            0 => {
                let v = self.vector_value(None);
                let f = self.choose_fn(&[
                    "vector_extract",
                    "vector",
                    "vector32",
                    "vector64",
                    "vector8",
                    "vector1bit",
                    "vector16",
                    "vectorb16",
                ]);
                format!("{f}({v})")
            }
            1 | 2 => {
                let vt = self.pick(&VectorType::ALL);
                let dims = if self.chance(0.9) {
                    self.rng.gen_range(0..6)
                } else {
                    65536
                };
                let a = self.vector_value(Some((vt, dims)));
                let b = self.vector_value(Some((vt, dims)));
                let f = self.choose_fn(&[
                    "vector_distance_cos",
                    "vector_distance_l2",
                    "vector_distance_jaccard",
                    "vector_concat",
                ]);
                format!("{f}({a}, {b})")
            }
            3 if self.exists("vector_slice") => {
                let v = self.vector_value(None);
                let a = self.int();
                let b = self.int();
                format!("vector_slice({v}, {a}, {b})")
            }
            4 => {
                let j = self.json_value();
                let p = self.pick(JSON_PATHS);
                let f = self.choose_fn(&[
                    "json_extract",
                    "jsonb_extract",
                    "json_type",
                    "json_remove",
                    "json_array_length",
                    "jsonb_remove",
                ]);
                format!("{f}({j}, {p})")
            }
            5 => {
                let j = self.json_value();
                let p = self.pick(JSON_PATHS);
                let v = self.expr(scope, depth);
                let f = self.choose_fn(&[
                    "json_set",
                    "json_insert",
                    "json_replace",
                    "jsonb_set",
                    "jsonb_insert",
                    "json_patch",
                ]);
                if f == "json_patch" {
                    let k = self.json_value();
                    format!("json_patch({j}, {k})")
                } else {
                    format!("{f}({j}, {p}, {v})")
                }
            }
            6 => {
                let j = self.json_value();
                let f = self.choose_fn(&[
                    "json",
                    "jsonb",
                    "json_valid",
                    "json_quote",
                    "json_pretty",
                    "json_error_position",
                    "json_valid",
                ]);
                if f == "json_valid" && self.chance(0.7) {
                    let flags = self.pick(&["1", "2", "4", "8", "15", "0", "-1", "16"]);
                    format!("json_valid({j}, {flags})")
                } else if f == "json_pretty" && self.chance(0.5) {
                    let indent =
                        self.pick(&["''", "'    '", "printf('%.*c', 100000, ' ')", "NULL"]);
                    format!("json_pretty({j}, {indent})")
                } else {
                    format!("{f}({j})")
                }
            }
            7 => {
                let s = self.expr(scope, depth);
                let a = self.int();
                let b = self.int();
                let f = self.choose_fn(&[
                    "substr",
                    "substring",
                    "instr",
                    "replace",
                    "printf",
                    "unistr",
                ]);
                match f {
                    "instr" => format!("instr({s}, {})", self.value()),
                    "replace" => format!("replace({s}, {}, {})", self.value(), self.value()),
                    "printf" => format!("printf({s}, {a}, {b})"),
                    "unistr" => format!(
                        "unistr({})",
                        self.pick(&[
                            "'\\u0041'",
                            "'\\'",
                            "'\\u'",
                            "'\\+10FFFF'",
                            "'\\+110000'",
                            "'\\d800'",
                            "'\\U0010FFFF'"
                        ])
                    ),
                    _ => format!("{f}({s}, {a}, {b})"),
                }
            }
            8 => {
                let n = self.size();
                let c = self.pick(&["'x'", "'é'", "''", "NULL", "char(0)"]);
                format!("printf('%.*c', {n}, {c})")
            }
            9 => {
                let a = self.expr(scope, depth);
                let b = self.expr(scope, depth);
                let f = self.choose_fn(&[
                    "group_concat",
                    "string_agg",
                    "concat",
                    "concat_ws",
                    "format",
                    "char",
                    "hex",
                    "unhex",
                    "quote",
                    "soundex",
                    "likelihood",
                    "zeroblob",
                    "round",
                ]);
                format!("{f}({a}, {b})")
            }
            10 => {
                let j = self.json_value();
                let f =
                    self.choose_fn(&["json_group_array", "jsonb_group_array", "json_group_object"]);
                if f == "json_group_object" {
                    format!("json_group_object({}, {j})", self.value())
                } else {
                    format!("{f}({j})")
                }
            }
            11 => {
                let f = self.choose_fn(&[
                    "date",
                    "time",
                    "datetime",
                    "julianday",
                    "unixepoch",
                    "strftime",
                    "timediff",
                ]);
                let t = self.pick(&[
                    "'now'",
                    "'2024-02-30'",
                    "'0000-01-01'",
                    "'9999-12-31 23:59:59.999'",
                    "5373484.5",
                    "-1e18",
                    "1e18",
                    "'2024-01-01T00:00:00Z'",
                    "''",
                    "'+'",
                ]);
                let m = self.pick(&[
                    "'+1 day'",
                    "'-9999999 years'",
                    "'start of month'",
                    "'weekday 7'",
                    "'unixepoch'",
                    "'auto'",
                    "'localtime'",
                    "'utc'",
                    "'subsec'",
                    "'+1e999 seconds'",
                    "'+9223372036854775807 days'",
                    "'ceiling'",
                    "'floor'",
                ]);
                if f == "strftime" {
                    let fmt = self.pick(&[
                        "'%Y-%m-%d %H:%M:%f'",
                        "'%J %s %w %j %W %U %G %V %u'",
                        "'%'",
                        "'%%%'",
                        "'%z'",
                    ]);
                    format!("strftime({fmt}, {t}, {m})")
                } else {
                    format!("{f}({t}, {m})")
                }
            }
            12 => {
                let x = self.pick(FLOATS);
                let f = self.choose_fn(&[
                    "abs", "round", "ceil", "floor", "ln", "log", "log2", "log10", "exp", "pow",
                    "sqrt", "sin", "acos", "atanh", "trunc", "sign", "mod", "degrees",
                ]);
                match f {
                    "round" | "pow" | "mod" | "log" => format!("{f}({x}, {})", self.int()),
                    _ => format!("{f}({x})"),
                }
            }
            13 => {
                let b = self.blob();
                let n = self.pick(&["0", "1", "2", "3", "-1", "4294967296", "2147483647"]);
                let f = self.choose_fn(&["rtreenode", "rtreedepth"]);
                if f == "rtreenode" {
                    format!("rtreenode({n}, {b})")
                } else {
                    format!("rtreedepth({b})")
                }
            }
            14 => {
                let f = self.choose_fn(&[
                    "snippet",
                    "offsets",
                    "matchinfo",
                    "highlight",
                    "bm25",
                    "fts5_source_id",
                    "fts3_tokenizer",
                    "load_extension",
                    "optimize",
                    "libsql_vector_idx",
                    "fts5",
                ]);
                let args = self.args(f, scope, depth, -1);
                format!("{f}({})", args.join(", "))
            }
            15 => {
                let blob = self.blob();
                let f = self.choose_fn(&[
                    "geopoly_area",
                    "geopoly_blob",
                    "geopoly_json",
                    "geopoly_svg",
                    "geopoly_bbox",
                    "geopoly_ccw",
                ]);
                format!("{f}({blob})")
            }
            16 if self.exists("geopoly_regular") => {
                let n = self.int();
                format!("geopoly_regular(0, 0, {}, {n})", self.pick(FLOATS))
            }
            17 => {
                let a = self.expr(scope, depth);
                let n = self.size();
                format!("randomblob({n}) || {a}")
            }
            18 => {
                let v = self.vector_value(None);
                let f = self.choose_fn(&["length", "typeof", "hex", "octet_length"]);
                format!("{f}({v})")
            }
            19 => {
                let a = self.int();
                let b = self.int();
                format!("substr(zeroblob({}), {a}, {b})", self.size())
            }
            20 => {
                let j = self.json_value();
                format!("(SELECT count(*) FROM json_tree({j}))")
            }
            _ => {
                let n = self.size();
                let f = self.choose_fn(&[
                    "'%*d'", "'%.*f'", "'%!.*g'", "'%.*q'", "'%.*w'", "'%-*s'", "'%0*d'",
                    "'%#.*x'", "'%,.*d'", "'%.*z'", "'%.*Q'",
                ]);
                let v = self.value_shallow();
                format!("printf({f}, {n}, {v})")
            }
        }
    }

    // ---- statements -----------------------------------------------------------------

    /// The first statements of a case: a schema to work on.
    pub fn setup_statement(&mut self) -> Statement {
        match self.rng.gen_range(0..10) {
            0..=5 => Statement::schema(self.create_table()),
            6 | 7 => Statement::schema(self.create_virtual()),
            8 => Statement::schema(self.create_index()),
            _ => Statement::new(self.insert()),
        }
    }

    pub fn statement(&mut self) -> Statement {
        let kind = self.weighted(KINDS);
        let statement = match kind {
            Kind::Select => {
                let n = self.rng.gen_range(1..5);
                Statement::new(self.select(0, n))
            }
            Kind::Functions => Statement::new(self.functions_barrage()),
            Kind::Insert => Statement::new(self.insert()),
            Kind::Update => Statement::new(self.update(false)),
            Kind::Delete => Statement::new(self.delete(false)),
            Kind::CreateTable => Statement::schema(self.create_table()),
            Kind::CreateIndex => Statement::schema(self.create_index()),
            Kind::CreateVirtual => Statement::schema(self.create_virtual()),
            Kind::CreateView => Statement::schema(self.create_view()),
            Kind::CreateTrigger => Statement::schema(self.create_trigger()),
            Kind::Alter => Statement::schema(self.alter()),
            Kind::Drop => Statement::schema(self.drop()),
            Kind::Transaction => Statement::schema(self.transaction()),
            Kind::Maintenance => self.maintenance(),
            Kind::Pragma => Statement {
                pragma: true,
                changes_schema: true,
                ..Statement::new(self.pragma())
            },
            Kind::VectorSearch => {
                let sql = self.vector_search();
                if sql.starts_with("CREATE") {
                    Statement::schema(sql)
                } else {
                    Statement::new(sql)
                }
            }
            Kind::FullText => Statement::new(self.full_text()),
            Kind::Rtree => Statement::new(self.rtree_query()),
            Kind::Printf => Statement::new(self.printf_barrage()),
            Kind::CorruptVectorIndex => Statement::new(self.corrupt_vector_index()),
        };
        if !statement.pragma && !statement.vacuum && self.chance(0.03) {
            let prefix = self.pick(&["EXPLAIN ", "EXPLAIN QUERY PLAN "]);
            return Statement {
                sql: format!("{prefix}{}", statement.sql),
                // Prepared afresh, as the node does.
                pragma: EXPLAIN_UNCACHED,
                ..statement
            };
        }
        statement
    }

    /// `SELECT f(…), g(…), …`: any functions with hostile arguments.
    fn functions_barrage(&mut self) -> String {
        let scope = Scope::default();
        let n = self.rng.gen_range(1..4);
        let calls: Vec<String> = (0..n)
            .map(|_| {
                if self.chance(0.5) {
                    self.call_listed(&scope, 1)
                } else {
                    self.curated_call(&scope, 1)
                }
            })
            .collect();
        format!("SELECT {}", calls.join(", "))
    }

    fn printf_barrage(&mut self) -> String {
        let scope = Scope::default();
        let fmt = {
            let specs = [
                "%d",
                "%s",
                "%q",
                "%Q",
                "%w",
                "%c",
                "%f",
                "%g",
                "%e",
                "%x",
                "%X",
                "%o",
                "%z",
                "%p",
                "%n",
                "%%",
                "%!",
                "%,d",
                "%-5s",
                "%010.3f",
                "%.999999999f",
                "%2147483647d",
                "%.2147483648s",
                "%*.*f",
                "%lld",
                "%llx",
                "%r",
                "%T",
                "%S",
                "%i",
                "%u",
                "%#x",
                "%!.20g",
                "%+.1e",
            ];
            let n = self.rng.gen_range(1..6);
            let parts: Vec<&str> = (0..n).map(|_| self.pick(&specs)).collect();
            literal(&parts.join(" "))
        };
        let args = self.args("printf", &scope, 2, -1);
        let mut all = vec![fmt];
        all.extend(args);
        let f = self.pick(&["printf", "format"]);
        format!("SELECT {f}({})", all.join(", "))
    }

    /// A result column list of `n` columns (0: `*` or a constant), aliased `a0`, `a1`, …
    fn result_columns(&mut self, scope: &Scope, n: usize) -> String {
        if n == 0 {
            return self.pick(&["*", "1", "NULL"]).to_string();
        }
        let mut scope = scope.clone();
        scope.aggregates = true;
        (0..n)
            .map(|i| format!("{} AS a{i}", self.expr(&scope, 1)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One FROM item and what it brings into scope.
    fn source(&mut self, depth: u32, alias: &str) -> (String, Vec<String>) {
        // Quoted: `table`, `notnull`, `from`, `to` are keywords.
        let refs_of = |columns: &[&str]| -> Vec<String> {
            columns.iter().map(|c| format!("{alias}.\"{c}\"")).collect()
        };
        match self.rng.gen_range(0..100) {
            0..=54 => match self.any_table() {
                Some(table) => {
                    let name = self.qualified(&table);
                    let refs = Self::column_refs(&table, Some(alias));
                    (format!("{name} AS {alias}"), refs)
                }
                None => self.source_series(alias),
            },
            55..=64 if depth < 2 => {
                let n = self.rng.gen_range(1..4);
                let sub = self.select(depth + 1, n);
                let refs = (0..n).map(|i| format!("{alias}.a{i}")).collect();
                (format!("({sub}) AS {alias}"), refs)
            }
            65..=74 => {
                let f = self.pick(&["json_each", "json_tree", "jsonb_each", "jsonb_tree"]);
                let j = self.json_value();
                let call = if self.chance(0.4) {
                    let p = self.pick(JSON_PATHS);
                    format!("{f}({j}, {p})")
                } else {
                    format!("{f}({j})")
                };
                (format!("{call} AS {alias}"), refs_of(JSON_EACH_COLUMNS))
            }
            75..=82 => {
                let (name, columns, takes_table) = self.pick(PRAGMA_FUNCTIONS);
                let call = if takes_table {
                    let t = self.table_name();
                    format!("{name}({})", literal(&t))
                } else {
                    format!("{name}()")
                };
                (format!("{call} AS {alias}"), refs_of(columns))
            }
            83..=90 => {
                let search = self.vector_top_k_call();
                let mut columns = vec!["id"];
                if !AVOID_VECTOR_TOP_K_HIDDEN_COLUMNS {
                    columns.extend(["idx", "vector", "k"]);
                }
                let mut refs = refs_of(&columns);
                refs.push(format!("{alias}.rowid"));
                (format!("{search} AS {alias}"), refs)
            }
            _ => self.source_series(alias),
        }
    }

    /// A recursive CTE as a FROM item (rows numbered `x`).
    fn source_series(&mut self, alias: &str) -> (String, Vec<String>) {
        let n = self.limit_count();
        (
            format!(
                "(WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT {n}) SELECT x FROM s) AS {alias}"
            ),
            vec![format!("{alias}.x")],
        )
    }

    fn limit_count(&mut self) -> String {
        if self.chance(0.9) {
            self.rng.gen_range(0..200).to_string()
        } else {
            self.pick(&[
                "1000",
                "100000",
                "1000000000",
                "-1",
                "0",
                "9223372036854775807",
            ])
            .to_string()
        }
    }

    /// A SELECT of `n` result columns (0: any).
    fn select(&mut self, depth: u32, n: usize) -> String {
        let mut sql = String::new();
        if depth == 0 && self.chance(0.15) {
            let limit = self.limit_count();
            let step = self.expr(&Scope::of(vec!["y".into()]), 2);
            sql.push_str(&format!(
                "WITH RECURSIVE c(x, y) AS (SELECT 1, {} UNION ALL SELECT x + 1, {step} FROM c LIMIT {limit}) ",
                self.value()
            ));
        }
        let mut refs = Vec::new();
        let mut from = String::new();
        if !(sql.is_empty() && self.chance(0.1)) {
            let joins = if depth < 2 {
                self.rng.gen_range(1..4)
            } else {
                1
            };
            for i in 0..joins {
                let alias = format!("j{depth}_{i}");
                let (item, mut item_refs) = if i == 0 && !sql.is_empty() && self.chance(0.6) {
                    (
                        format!("c AS {alias}"),
                        vec![format!("{alias}.x"), format!("{alias}.y")],
                    )
                } else {
                    self.source(depth, &alias)
                };
                if i == 0 {
                    from = format!(" FROM {item}");
                } else {
                    let join = self.pick(&[
                        "JOIN",
                        "LEFT JOIN",
                        "RIGHT JOIN",
                        "FULL JOIN",
                        "CROSS JOIN",
                        "NATURAL JOIN",
                        ",",
                    ]);
                    from.push_str(&format!(" {join} {item}"));
                    if !matches!(join, "CROSS JOIN" | "NATURAL JOIN" | ",") {
                        let mut on_refs = refs.clone();
                        on_refs.extend(item_refs.iter().cloned());
                        let on = self.expr(&Scope::of(on_refs), 2);
                        from.push_str(&format!(" ON {on}"));
                    }
                }
                refs.append(&mut item_refs);
            }
        }
        let scope = Scope::of(refs);
        let distinct = if self.chance(0.1) { "DISTINCT " } else { "" };
        let columns = self.result_columns(&scope, n);
        sql.push_str(&format!("SELECT {distinct}{columns}{from}"));
        if self.chance(0.5) {
            let w = self.expr(&scope, 1);
            sql.push_str(&format!(" WHERE {w}"));
        }
        if self.chance(0.2) {
            let g = self.expr(&scope, 2);
            sql.push_str(&format!(" GROUP BY {g}"));
            if self.chance(0.5) {
                let mut having = scope.clone();
                having.aggregates = true;
                let h = self.expr(&having, 2);
                sql.push_str(&format!(" HAVING {h}"));
            }
        }
        if depth == 0 && self.chance(0.1) {
            // Wrapped: a compound's left side may not have its own ORDER BY or LIMIT.
            let other = format!("SELECT * FROM ({})", self.select(depth + 1, n.max(1)));
            let op = self.pick(&["UNION", "UNION ALL", "INTERSECT", "EXCEPT"]);
            sql = format!("{sql} {op} {other}");
        }
        if self.chance(0.3) {
            let o = if n > 0 && self.chance(0.5) {
                self.rng.gen_range(1..=n).to_string()
            } else {
                self.expr(&scope, 2)
            };
            let dir = self.pick(&["", " DESC", " ASC NULLS LAST"]);
            sql.push_str(&format!(" ORDER BY {o}{dir}"));
        }
        if self.chance(0.4) || depth == 0 {
            let l = self.limit_count();
            sql.push_str(&format!(" LIMIT {l}"));
            if self.chance(0.2) {
                let o = self.int();
                sql.push_str(&format!(" OFFSET {o}"));
            }
        }
        sql
    }

    fn vector_indexes(&self) -> Vec<Index> {
        self.schema
            .indexes
            .iter()
            .filter(|i| i.vector)
            .cloned()
            .collect()
    }

    /// `vector_top_k('<index>', <vector>, <k>)`: mostly on an index that exists, with a
    /// vector of its column's type and size.
    fn vector_top_k_call(&mut self) -> String {
        let indexes = self.vector_indexes();
        let (name, column) = match indexes.choose(&mut self.rng) {
            Some(index) if self.chance(0.9) => {
                let column = self
                    .schema
                    .tables
                    .iter()
                    .find(|t| t.name == index.table)
                    .and_then(|t| t.columns.iter().find_map(|c| c.vector()));
                (index.name.clone(), column)
            }
            _ => (
                self.pick(&[
                    "nosuch",
                    "",
                    "t0",
                    "sqlite_schema",
                    "libsql_vector_meta_shadow",
                ])
                .to_string(),
                None,
            ),
        };
        let name = match self.rng.gen_range(0..20) {
            0 => format!("main.{name}"),
            1 => format!("temp.{name}"),
            2 => format!("{}.{name}", self.pick(&["x", "", "\"main\"", "main.main"])),
            _ => name,
        };
        let v = self.vector_value(column);
        let k = if self.chance(0.6) {
            self.rng.gen_range(0..20).to_string()
        } else {
            self.pick(&[
                "0",
                "-1",
                "65536",
                "65537",
                "1000000000",
                "536870913",
                "4294967297",
                "9223372036854775807",
                "1e9",
                "1e300",
                "-1e300",
                "1.5",
                "NULL",
                "'10'",
                "x'00'",
                "(SELECT 1000000000)",
            ])
            .to_string()
        };
        format!("vector_top_k({}, {v}, {k})", literal(&name))
    }

    fn vector_search(&mut self) -> String {
        if self.vector_indexes().is_empty() && self.chance(0.7) {
            // Something to search first: a vector index (or a table to put one on).
            let vectors = self.tables(|t| {
                t.kind == TableKind::Plain && t.columns.iter().any(|c| c.vector().is_some())
            });
            if vectors.is_empty() {
                let dims = self.rng.gen_range(1..8);
                let vt = self.pick(&VectorType::ALL);
                let ty = self.pick(vt.column_types());
                let name = format!("t{}", self.rng.gen_range(0..6));
                return if self.chance(0.3) {
                    format!("CREATE TABLE {name} (id TEXT PRIMARY KEY, e {ty}({dims}), note TEXT) WITHOUT ROWID")
                } else {
                    format!(
                        "CREATE TABLE {name} (id INTEGER PRIMARY KEY, e {ty}({dims}), note TEXT)"
                    )
                };
            }
            return self.create_index();
        }
        let search = self.vector_top_k_call();
        let hidden = self.vector_top_k_columns("v");
        let indexes = self.vector_indexes();
        let index = indexes.choose(&mut self.rng).cloned();
        let table = index.as_ref().and_then(|i| {
            self.schema
                .tables
                .iter()
                .find(|t| t.name == i.table)
                .cloned()
        });
        let Some(table) = table.filter(|_| self.chance(0.7)) else {
            return format!("SELECT {hidden} FROM {search} AS v");
        };
        let name = ident(&table.name);
        let vector = table.columns.iter().find(|c| c.vector().is_some()).cloned();
        let key = if self.chance(0.7) {
            "rowid".to_string()
        } else {
            table
                .columns
                .first()
                .map(|c| ident(&c.name))
                .unwrap_or_else(|| "rowid".into())
        };
        match (self.rng.gen_range(0..4), vector) {
            (0, Some(c)) => {
                let q = self.vector_value(c.vector());
                let col = ident(&c.name);
                format!(
                    "SELECT {hidden}, vector_distance_cos(t.{col}, {q}), vector_extract(t.{col}) FROM {search} AS v JOIN {name} AS t ON t.{key} = v.id"
                )
            }
            (1, _) => {
                // The search as the inner loop: filtered again for every outer row.
                let l = self.limit_count();
                format!(
                    "SELECT count(*), {hidden} FROM {name} AS a CROSS JOIN {search} AS v LIMIT {l}"
                )
            }
            (2, Some(c)) => {
                // Correlated: a search per row, with the row's own vector.
                let index = index.map(|i| i.name).unwrap_or_default();
                let k = self.rng.gen_range(0..30);
                let l = self.limit_count();
                format!(
                    "SELECT (SELECT group_concat(id) FROM vector_top_k({}, a.{}, {k})) FROM {name} AS a LIMIT {l}",
                    literal(&index),
                    ident(&c.name)
                )
            }
            _ => format!("SELECT {hidden} FROM {search} AS v JOIN {name} AS t ON t.{key} = v.id"),
        }
    }

    /// Result columns of a `vector_top_k` aliased `alias`: `id`, its rowid and, unless
    /// known to crash, the hidden parameter columns.
    fn vector_top_k_columns(&mut self, alias: &str) -> String {
        let mut columns = vec![format!("{alias}.id")];
        if self.chance(0.3) {
            columns.push(format!("{alias}.rowid"));
        }
        if !AVOID_VECTOR_TOP_K_HIDDEN_COLUMNS && self.chance(0.3) {
            let hidden = self.pick(&["idx", "vector", "k"]);
            columns.push(format!("{alias}.{hidden}"));
        }
        if self.chance(0.1) {
            columns.push("*".into());
        }
        columns.join(", ")
    }

    fn match_expression(&mut self) -> String {
        const EXPRESSIONS: &[&str] = &[
            "alpha",
            "alpha AND beta",
            "alpha OR beta",
            "alpha NOT beta",
            "\"hello world\"",
            "hel*",
            "^alpha",
            "NEAR(alpha beta, 2)",
            "NEAR(alpha beta, 2147483648)",
            "NEAR(alpha beta, -1)",
            "alpha NEAR/3 beta",
            "alpha NEAR/2147483647 beta",
            "(alpha OR (beta AND (gamma OR (delta AND (x OR (y))))))",
            "a:alpha",
            "{a b}: alpha",
            "- a : alpha",
            "*",
            "\"\"",
            "(",
            ")",
            "alpha AND",
            "NOT",
            "\"unterminated",
            "x*y*",
            "a* + b*",
            "\u{e9}t\u{e9}",
            "\u{0}",
        ];
        if self.chance(0.8) {
            literal(self.pick(EXPRESSIONS))
        } else {
            self.value()
        }
    }

    fn full_text(&mut self) -> String {
        let fts = self.tables(|t| matches!(t.kind, TableKind::Fts3 | TableKind::Fts5));
        let Some(table) = fts.choose(&mut self.rng).cloned() else {
            let m = self.match_expression();
            return format!("SELECT * FROM t0 WHERE t0 MATCH {m}");
        };
        let name = ident(&table.name);
        let m = self.match_expression();
        let columns = if table.kind == TableKind::Fts5 {
            let col = self.rng.gen_range(-1..4);
            let n = self.pick(&["64", "0", "-1", "2147483647", "1"]);
            format!(
                "rowid, highlight({name}, {col}, '[', ']'), snippet({name}, {col}, '<', '>', '...', {n}), bm25({name}{})",
                if self.chance(0.5) { ", 1.0, -1e300" } else { "" }
            )
        } else {
            let fmt = self.pick(&[
                "'pcnalx'",
                "'pcx'",
                "'y'",
                "'b'",
                "''",
                "'pcnalxyb'",
                "'zz'",
            ]);
            let n = self.pick(&["15", "-1", "0", "64", "2147483647"]);
            format!(
                "rowid, snippet({name}, '[', ']', '...', -1, {n}), offsets({name}), matchinfo({name}, {fmt})"
            )
        };
        let order = if table.kind == TableKind::Fts5 && self.chance(0.5) {
            " ORDER BY rank"
        } else {
            ""
        };
        let target = if self.chance(0.8) {
            name.clone()
        } else {
            // A column filter.
            Self::visible_columns(&table)
                .first()
                .map(|c| format!("{name}.{}", ident(&c.name)))
                .unwrap_or_else(|| name.clone())
        };
        let l = self.limit_count();
        format!("SELECT {columns} FROM {name} WHERE {target} MATCH {m}{order} LIMIT {l}")
    }

    fn rtree_query(&mut self) -> String {
        let rtrees = self.tables(|t| matches!(t.kind, TableKind::Rtree | TableKind::Geopoly));
        let Some(table) = rtrees.choose(&mut self.rng).cloned() else {
            let b = self.blob();
            return format!("SELECT rtreenode(2, {b}), rtreedepth({b})");
        };
        let name = ident(&table.name);
        match self.rng.gen_range(0..4) {
            0 => format!("SELECT rtreecheck({})", literal(&table.name)),
            1 if table.kind == TableKind::Geopoly => {
                let shape = self.polygon();
                let f = self.pick(&["geopoly_overlap", "geopoly_within"]);
                format!("SELECT rowid, geopoly_json(_shape) FROM {name} WHERE {f}(_shape, {shape})")
            }
            1 => {
                let node = self.pick(&["0", "1", "2", "-1"]);
                format!(
                    "SELECT rtreenode(2, data) FROM {}_node WHERE nodeno >= {node}",
                    ident(&table.name)
                )
            }
            _ => {
                let columns = Self::visible_columns(&table);
                let scope = Scope::of(columns.iter().map(|c| ident(&c.name)).collect());
                let mut conds = Vec::new();
                for c in columns.iter().skip(1).take(4) {
                    let op = self.pick(&["<", "<=", ">", ">=", "="]);
                    let v = self.value_shallow();
                    conds.push(format!("{} {op} {v}", ident(&c.name)));
                }
                if conds.is_empty() || self.chance(0.3) {
                    conds.push(self.expr(&scope, 1));
                }
                format!("SELECT * FROM {name} WHERE {}", conds.join(" AND "))
            }
        }
    }

    fn polygon(&mut self) -> String {
        match self.rng.gen_range(0..4) {
            0 => "'[[0,0],[1,0],[1,1],[0,1],[0,0]]'".into(),
            1 => "'[[0,0],[1,0],[0,0]]'".into(),
            2 => self.blob(),
            _ => format!(
                "geopoly_regular(0, 0, {}, {})",
                self.pick(FLOATS),
                self.int()
            ),
        }
    }

    // ---- writes ---------------------------------------------------------------------

    /// A value for `column`: of its vector type and size when it is a vector.
    fn value_for(&mut self, column: &Column, scope: &Scope) -> String {
        if let Some(v) = column.vector() {
            if self.chance(0.9) {
                return self.vector_value(Some(v));
            }
        }
        if self.chance(0.8) {
            self.value()
        } else {
            self.expr(scope, 2)
        }
    }

    fn returning(&mut self, scope: &Scope) -> String {
        if !self.chance(0.25) {
            return String::new();
        }
        if self.chance(0.4) {
            return " RETURNING *".into();
        }
        let n = self.rng.gen_range(1..3);
        let exprs: Vec<String> = (0..n).map(|_| self.expr(scope, 2)).collect();
        format!(" RETURNING {}", exprs.join(", "))
    }

    fn insert(&mut self) -> String {
        let Some(table) = self.writable_table() else {
            return self.create_table();
        };
        match table.kind {
            TableKind::Fts3 | TableKind::Fts5 if self.chance(0.2) => {
                return self.fts_command(&table)
            }
            _ => {}
        }
        let name = self.qualified(&table);
        let columns = Self::visible_columns(&table);
        let conflict = self.pick(&[
            "",
            "",
            "",
            "OR REPLACE ",
            "OR IGNORE ",
            "OR ABORT ",
            "OR FAIL ",
            "OR ROLLBACK ",
        ]);
        let verb = if self.chance(0.05) {
            "REPLACE"
        } else {
            "INSERT"
        };
        let verb = if verb == "REPLACE" {
            "REPLACE ".to_string()
        } else {
            format!("INSERT {conflict}")
        };
        let chosen: Vec<Column> = if columns.is_empty() || self.chance(0.2) {
            columns.clone()
        } else {
            let mut c = columns.clone();
            c.shuffle(&mut self.rng);
            c.truncate(self.rng.gen_range(1..=columns.len()));
            c
        };
        let column_list = chosen
            .iter()
            .map(|c| ident(&c.name))
            .collect::<Vec<_>>()
            .join(", ");
        let target_refs: Vec<String> = columns.iter().map(|c| ident(&c.name)).collect();
        let body = match self.rng.gen_range(0..10) {
            0 => " DEFAULT VALUES".to_string(),
            1 | 2 => {
                // Many rows from a recursive CTE.
                let n = self.limit_count();
                let scope = Scope::of(vec!["x".into()]);
                let values: Vec<String> = chosen
                    .iter()
                    .map(|c| {
                        if let Some(v) = c.vector() {
                            self.vector_value(Some(v))
                        } else {
                            self.expr(&scope, 2)
                        }
                    })
                    .collect();
                format!(
                    " ({column_list}) WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s LIMIT {n}) SELECT {} FROM s WHERE true",
                    if values.is_empty() { "x".to_string() } else { values.join(", ") }
                )
            }
            3 => {
                let sub = self.select(1, chosen.len().max(1));
                format!(" ({column_list}) {sub}")
            }
            _ => {
                let rows = self.rng.gen_range(1..4);
                let empty = Scope::default();
                let tuples: Vec<String> = (0..rows)
                    .map(|_| {
                        let values: Vec<String> =
                            chosen.iter().map(|c| self.value_for(c, &empty)).collect();
                        format!("({})", values.join(", "))
                    })
                    .collect();
                format!(" ({column_list}) VALUES {}", tuples.join(", "))
            }
        };
        let mut sql = format!("{verb}INTO {name}{body}");
        if sql.contains(" VALUES ") || sql.contains(" WHERE true") {
            if let Some(upsert) = self.upsert(&table) {
                sql.push_str(&upsert);
            }
        }
        sql.push_str(&self.returning(&Scope::of(target_refs)));
        sql
    }

    fn upsert(&mut self, table: &Table) -> Option<String> {
        if !self.chance(0.25) {
            return None;
        }
        let columns = Self::visible_columns(table);
        let target = columns.choose(&mut self.rng)?.clone();
        if self.chance(0.3) {
            return Some(format!(" ON CONFLICT({}) DO NOTHING", ident(&target.name)));
        }
        let mut refs: Vec<String> = columns.iter().map(|c| ident(&c.name)).collect();
        refs.extend(
            columns
                .iter()
                .map(|c| format!("excluded.{}", ident(&c.name))),
        );
        let scope = Scope::of(refs);
        let set = columns.choose(&mut self.rng)?.clone();
        let value = self.expr(&scope, 2);
        let mut s = format!(
            " ON CONFLICT({}) DO UPDATE SET {} = {value}",
            ident(&target.name),
            ident(&set.name)
        );
        if self.chance(0.3) {
            let w = self.expr(&scope, 2);
            s.push_str(&format!(" WHERE {w}"));
        }
        if self.chance(0.2) {
            s.push_str(" ON CONFLICT DO NOTHING");
        }
        Some(s)
    }

    /// The special INSERTs of full-text tables (`INSERT INTO f(f) VALUES('optimize')`).
    fn fts_command(&mut self, table: &Table) -> String {
        let name = ident(&table.name);
        let commands: &[&str] = if table.kind == TableKind::Fts5 {
            &[
                "'optimize'",
                "'rebuild'",
                "'integrity-check'",
                "'merge', 500",
                "'merge', -2147483648",
                "'automerge', 8",
                "'automerge', 2147483647",
                "'crisismerge', 1",
                "'usermerge', 2",
                "'pgsz', 64",
                "'pgsz', 2147483647",
                "'rank', 'bm25(10.0, 5.0)'",
                "'rank', 'nosuch()'",
                "'secure-delete', 1",
                "'deletemerge', 100",
                "'delete-all'",
                "'hashsize', 1",
            ]
        } else {
            &[
                "'optimize'",
                "'rebuild'",
                "'integrity-check'",
                "'merge=500,2'",
                "'merge=2147483647,2147483647'",
                "'merge=-1,-1'",
                "'automerge=8'",
                "'automerge=2147483647'",
                "'nodesize=1'",
                "'maxpending=1'",
            ]
        };
        let command = self.pick(commands);
        if command.contains(", ") {
            format!("INSERT INTO {name}({name}, rank) VALUES ({command})")
        } else {
            format!("INSERT INTO {name}({name}) VALUES ({command})")
        }
    }

    fn update(&mut self, in_trigger: bool) -> String {
        let Some(table) = self.writable_table() else {
            return "UPDATE t0 SET c0 = 1".into();
        };
        let columns = Self::visible_columns(&table);
        let mut refs = Self::column_refs(&table, None);
        if in_trigger {
            refs.extend(columns.iter().map(|c| format!("new.{}", ident(&c.name))));
        }
        let scope = Scope::of(refs);
        let n = self.rng.gen_range(1..=columns.len().clamp(1, 3));
        let mut sets: Vec<String> = Vec::new();
        for _ in 0..n {
            if let Some(c) = columns.choose(&mut self.rng).cloned() {
                let value = self.value_for(&c, &scope);
                sets.push(format!("{} = {value}", ident(&c.name)));
            }
        }
        if sets.is_empty() {
            return format!("UPDATE {} SET rowid = rowid", ident(&table.name));
        }
        let conflict = self.pick(&["", "", "OR REPLACE ", "OR IGNORE "]);
        let mut sql = format!(
            "UPDATE {conflict}{} SET {}",
            self.qualified(&table),
            sets.join(", ")
        );
        if self.chance(0.6) {
            let w = self.expr(&scope, 1);
            sql.push_str(&format!(" WHERE {w}"));
        }
        if !in_trigger {
            sql.push_str(&self.returning(&scope));
        }
        sql
    }

    fn delete(&mut self, in_trigger: bool) -> String {
        let Some(table) = self.writable_table() else {
            return "DELETE FROM t0".into();
        };
        let scope = Scope::of(Self::column_refs(&table, None));
        let mut sql = format!("DELETE FROM {}", self.qualified(&table));
        if self.chance(0.8) {
            let w = self.expr(&scope, 1);
            sql.push_str(&format!(" WHERE {w}"));
        }
        if !in_trigger {
            sql.push_str(&self.returning(&scope));
        }
        sql
    }

    // ---- schema ---------------------------------------------------------------------

    fn column_type(&mut self) -> String {
        if self.chance(0.35) {
            let vt = self.pick(&VectorType::ALL);
            let name = self.pick(vt.column_types());
            let dims = self.pick(DIMS);
            if self.chance(0.05) {
                return name.to_string();
            }
            format!("{name}({dims})")
        } else {
            self.pick(PLAIN_TYPES).to_string()
        }
    }

    fn column_def(&mut self, name: &str, others: &[String]) -> String {
        let ty = self.column_type();
        let mut def = if ty.is_empty() {
            ident(name)
        } else {
            format!("{} {ty}", ident(name))
        };
        let scope = Scope::of(others.to_vec());
        let n = self.rng.gen_range(0..3);
        for _ in 0..n {
            let constraint = match self.rng.gen_range(0..11) {
                0 | 9 if self.primary_key_written => "UNIQUE".to_string(),
                0 => {
                    self.primary_key_written = true;
                    "PRIMARY KEY".to_string()
                }
                1 => "NOT NULL".to_string(),
                2 => "UNIQUE".to_string(),
                3 => format!("CHECK ({})", self.expr(&scope, 2)),
                4 => format!("DEFAULT {}", self.value_shallow()),
                5 => format!("DEFAULT ({})", self.expr(&Scope::default(), 2)),
                6 => format!("COLLATE {}", self.pick(COLLATIONS)),
                7 => {
                    let t = self.parent_table();
                    format!(
                        "REFERENCES {}({}) ON DELETE CASCADE",
                        ident(&t),
                        self.pick(&["c0", "c1", "rowid"])
                    )
                }
                8 if !others.is_empty() => {
                    let e = self.expr(&scope, 2);
                    let kind = self.pick(&["VIRTUAL", "STORED"]);
                    format!("GENERATED ALWAYS AS ({e}) {kind}")
                }
                9 => {
                    self.primary_key_written = true;
                    if self.chance(0.8) {
                        def = format!("{} INTEGER", ident(name));
                    }
                    "PRIMARY KEY AUTOINCREMENT".to_string()
                }
                _ => "NOT NULL DEFAULT 0".to_string(),
            };
            def.push(' ');
            def.push_str(&constraint);
        }
        def
    }

    fn create_table(&mut self) -> String {
        self.primary_key_written = false;
        let name = format!("t{}", self.rng.gen_range(0..6));
        let n = self.rng.gen_range(1..6);
        let names: Vec<String> = (0..n).map(|i| format!("c{i}")).collect();
        let mut defs: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, c)| self.column_def(c, &names[..i]))
            .collect();
        if self.chance(0.3) {
            let scope = Scope::of(names.clone());
            let c = match self.rng.gen_range(0..4) {
                0 if !self.primary_key_written => {
                    format!("PRIMARY KEY ({})", self.pick_string(&names))
                }
                1 => format!(
                    "UNIQUE ({}, {})",
                    self.pick_string(&names),
                    self.pick_string(&names)
                ),
                2 => format!("CHECK ({})", self.expr(&scope, 2)),
                _ => {
                    let t = self.parent_table();
                    format!(
                        "FOREIGN KEY ({}) REFERENCES {}",
                        self.pick_string(&names),
                        ident(&t)
                    )
                }
            };
            defs.push(c);
        }
        let temp = if self.chance(0.1) { "TEMP " } else { "" };
        let exists = if self.chance(0.3) {
            "IF NOT EXISTS "
        } else {
            ""
        };
        let options = self.pick(&[
            "",
            "",
            "",
            "",
            " WITHOUT ROWID",
            " STRICT",
            " RANDOM ROWID",
            " WITHOUT ROWID, STRICT",
        ]);
        if self.chance(0.08) {
            let sub = self.select(1, n);
            return format!("CREATE {temp}TABLE {exists}{name} AS {sub}");
        }
        if options.contains("WITHOUT ROWID") && !self.primary_key_written && self.chance(0.9) {
            defs.push("PRIMARY KEY (c0)".into());
        }
        if options.contains("STRICT") && self.chance(0.8) {
            // Only INT, INTEGER, REAL, TEXT, BLOB and ANY are STRICT types.
            for def in defs.iter_mut() {
                for (from, to) in [
                    ("VARCHAR(10)", "TEXT"),
                    ("DOUBLE PRECISION", "REAL"),
                    ("BOOLEAN", "INT"),
                    ("DATETIME", "TEXT"),
                    ("NUMERIC", "ANY"),
                ] {
                    *def = def.replace(from, to);
                }
            }
        }
        format!(
            "CREATE {temp}TABLE {exists}{name} ({}){options}",
            defs.join(", ")
        )
    }

    fn vector_index_params(&mut self) -> Vec<String> {
        let n = self.rng.gen_range(0..4);
        (0..n)
            .map(|_| {
                let p = match self.rng.gen_range(0..12) {
                    0 => format!("metric={}", self.pick(&["cosine", "l2", "cos", "L2", ""])),
                    1 => format!(
                        "compress_neighbors={}",
                        self.pick(&[
                            "float1bit",
                            "float8",
                            "float16",
                            "floatb16",
                            "float32",
                            "float64",
                            "none",
                            ""
                        ])
                    ),
                    2 => format!(
                        "max_neighbors={}",
                        self.pick(&[
                            "1",
                            "2",
                            "8",
                            "64",
                            "0",
                            "-1",
                            "65536",
                            "65537",
                            "2147483648",
                            "x"
                        ])
                    ),
                    3 => format!(
                        "search_l={}",
                        self.pick(&["1", "10", "0", "-1", "65536", "65537", "1000000000", "1e3"])
                    ),
                    4 => format!(
                        "insert_l={}",
                        self.pick(&[
                            "1",
                            "10",
                            "0",
                            "-1",
                            "65536",
                            "536870913",
                            "18446744073709551617"
                        ])
                    ),
                    5 => format!(
                        "alpha={}",
                        self.pick(&[
                            "1.2",
                            "1",
                            "0",
                            "-1",
                            "1e308",
                            "nan",
                            "inf",
                            "x",
                            "0.0000001"
                        ])
                    ),
                    6 => "type=diskann".to_string(),
                    7 => self
                        .pick(&[
                            "type=other",
                            "foo=bar",
                            "=",
                            "metric",
                            "max_neighbors=",
                            "",
                            "metric=cosine=l2",
                        ])
                        .to_string(),
                    _ => format!("max_neighbors={}", self.rng.gen_range(1..20)),
                };
                literal(&p)
            })
            .collect()
    }

    fn create_index(&mut self) -> String {
        let name = format!("i{}", self.rng.gen_range(0..8));
        let with_vectors = self.tables(|t| {
            t.kind == TableKind::Plain && t.columns.iter().any(|c| c.vector().is_some())
        });
        let table = match with_vectors.choose(&mut self.rng) {
            Some(t) if self.chance(0.5) => Some(t.clone()),
            _ => self.writable_table(),
        };
        let Some(table) = table else {
            return format!("CREATE INDEX {name} ON t0(c0)");
        };
        let columns = Self::visible_columns(&table);
        let vectors: Vec<Column> = columns
            .iter()
            .filter(|c| c.vector().is_some())
            .cloned()
            .collect();
        let exists = if self.chance(0.2) {
            "IF NOT EXISTS "
        } else {
            ""
        };
        if !vectors.is_empty() && self.chance(0.6) || self.chance(0.05) {
            let column = vectors
                .choose(&mut self.rng)
                .map(|c| ident(&c.name))
                .unwrap_or_else(|| {
                    columns
                        .first()
                        .map(|c| ident(&c.name))
                        .unwrap_or_else(|| "c0".into())
                });
            let mut args = vec![column];
            args.extend(self.vector_index_params());
            return format!(
                "CREATE INDEX {exists}{name} ON {}(libsql_vector_idx({}))",
                ident(&table.name),
                args.join(", ")
            );
        }
        let scope = Scope::of(columns.iter().map(|c| ident(&c.name)).collect());
        let n = self.rng.gen_range(1..3);
        let keys: Vec<String> = (0..n)
            .map(|_| {
                let key = if self.chance(0.7) || scope.refs.is_empty() {
                    columns
                        .choose(&mut self.rng)
                        .map(|c| ident(&c.name))
                        .unwrap_or_else(|| "rowid".into())
                } else {
                    format!("({})", self.expr(&scope, 2))
                };
                let suffix = self.pick(&["", "", " DESC", " COLLATE NOCASE", " ASC"]);
                format!("{key}{suffix}")
            })
            .collect();
        let unique = if self.chance(0.2) { "UNIQUE " } else { "" };
        let mut sql = format!(
            "CREATE {unique}INDEX {exists}{name} ON {}({})",
            ident(&table.name),
            keys.join(", ")
        );
        if self.chance(0.25) {
            let w = self.expr(&scope, 2);
            sql.push_str(&format!(" WHERE {w}"));
        }
        sql
    }

    fn create_virtual(&mut self) -> String {
        let exists = if self.chance(0.2) {
            "IF NOT EXISTS "
        } else {
            ""
        };
        match self.rng.gen_range(0..20) {
            0..=5 => {
                let name = format!("f{}", self.rng.gen_range(0..4));
                let n = self.rng.gen_range(1..4);
                let mut args: Vec<String> = (0..n).map(|i| format!("x{i}")).collect();
                if self.chance(0.3) {
                    args[0].push_str(" UNINDEXED");
                }
                let options = [
                    "tokenize='porter unicode61 remove_diacritics 2'",
                    "tokenize='trigram'",
                    "tokenize='trigram case_sensitive 1'",
                    "tokenize='ascii'",
                    "tokenize='unicode61 tokenchars ''-_'' separators ''x'''",
                    "tokenize='nosuch'",
                    "prefix='2 3'",
                    "prefix='0'",
                    "prefix='1000000'",
                    "content=''",
                    "content='t0'",
                    "content_rowid='c0'",
                    "contentless_delete=1",
                    "columnsize=0",
                    "detail=none",
                    "detail=column",
                    "detail=full",
                    "locale=1",
                    "tokendata=1",
                ];
                for _ in 0..self.rng.gen_range(0..3) {
                    args.push(self.pick(&options).to_string());
                }
                format!(
                    "CREATE VIRTUAL TABLE {exists}{name} USING fts5({})",
                    args.join(", ")
                )
            }
            6..=10 => {
                let name = format!("f{}", self.rng.gen_range(4..7));
                let module = self.pick(&["fts3", "fts4", "fts4"]);
                let n = self.rng.gen_range(1..4);
                let mut args: Vec<String> = (0..n).map(|i| format!("x{i}")).collect();
                let options = [
                    "tokenize=porter",
                    "tokenize=simple",
                    "tokenize=unicode61 \"remove_diacritics=2\"",
                    "tokenize=icu",
                    "prefix=\"2,4\"",
                    "prefix=\"0\"",
                    "prefix=\"2147483647\"",
                    "compress=zip",
                    "matchinfo=fts3",
                    "order=DESC",
                    "notindexed=x0",
                    "languageid=\"lid\"",
                    "content=\"\"",
                    "content=\"t0\"",
                ];
                for _ in 0..self.rng.gen_range(0..3) {
                    args.push(self.pick(&options).to_string());
                }
                format!(
                    "CREATE VIRTUAL TABLE {exists}{name} USING {module}({})",
                    args.join(", ")
                )
            }
            11..=15 => {
                let name = format!("r{}", self.rng.gen_range(0..3));
                let module = self.pick(&["rtree", "rtree_i32"]);
                let dims = self.pick(&[1, 2, 2, 3, 5, 6]);
                let mut args = vec!["id".to_string()];
                for d in 0..dims {
                    args.push(format!("min{d}"));
                    args.push(format!("max{d}"));
                }
                if self.chance(0.15) {
                    args.pop();
                }
                if self.chance(0.3) {
                    args.push("+aux TEXT".into());
                }
                format!(
                    "CREATE VIRTUAL TABLE {exists}{name} USING {module}({})",
                    args.join(", ")
                )
            }
            16..=17 => {
                let name = format!("g{}", self.rng.gen_range(0..2));
                format!("CREATE VIRTUAL TABLE {exists}{name} USING geopoly(a, b)")
            }
            _ => {
                // Modules the sandbox refuses: the authorizer's answer is what runs.
                let module = self.pick(&[
                    "dbstat",
                    "sqlite_dbpage",
                    "fts5vocab(f0, 'row')",
                    "json_each",
                    "vector_top_k",
                    "nosuch",
                    "sqlite_stmt",
                ]);
                format!(
                    "CREATE VIRTUAL TABLE x{} USING {module}",
                    self.rng.gen_range(0..3)
                )
            }
        }
    }

    fn create_view(&mut self) -> String {
        let name = format!("v{}", self.rng.gen_range(0..4));
        let n = self.rng.gen_range(1..4);
        let sub = self.select(1, n);
        let temp = if self.chance(0.1) { "TEMP " } else { "" };
        let columns = if self.chance(0.2) {
            format!(
                "({})",
                (0..n)
                    .map(|i| format!("w{i}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        };
        format!("CREATE {temp}VIEW IF NOT EXISTS {name}{columns} AS {sub}")
    }

    fn create_trigger(&mut self) -> String {
        let name = format!("tr{}", self.rng.gen_range(0..5));
        let Some(table) = self.any_table() else {
            return format!("CREATE TRIGGER {name} AFTER INSERT ON t0 BEGIN SELECT 1; END");
        };
        let when = if table.kind == TableKind::View {
            "INSTEAD OF"
        } else {
            self.pick(&["BEFORE", "AFTER", "AFTER", "INSTEAD OF"])
        };
        let columns = Self::visible_columns(&table);
        let event = match self.rng.gen_range(0..3) {
            0 => "INSERT".to_string(),
            1 => match columns.choose(&mut self.rng) {
                Some(c) if self.chance(0.5) => format!("UPDATE OF {}", ident(&c.name)),
                _ => "UPDATE".to_string(),
            },
            _ => "DELETE".to_string(),
        };
        let mut refs: Vec<String> = Vec::new();
        for c in &columns {
            if event != "DELETE" {
                refs.push(format!("new.{}", ident(&c.name)));
            }
            if event != "INSERT" {
                refs.push(format!("old.{}", ident(&c.name)));
            }
        }
        let scope = Scope::of(refs);
        let mut sql = format!(
            "CREATE TRIGGER IF NOT EXISTS {name} {when} {event} ON {} FOR EACH ROW",
            ident(&table.name)
        );
        if self.chance(0.3) {
            let w = self.expr(&scope, 2);
            sql.push_str(&format!(" WHEN {w}"));
        }
        let n = self.rng.gen_range(1..4);
        let body: Vec<String> = (0..n)
            .map(|_| match self.rng.gen_range(0..5) {
                0 => {
                    let v = self.expr(&scope, 2);
                    let target = self.table_name();
                    format!("INSERT INTO {} SELECT {v}", ident(&target))
                }
                1 => self.update(true),
                2 => self.delete(true),
                3 => {
                    let what = self.pick(&[
                        "IGNORE",
                        "ABORT, 'stop'",
                        "FAIL, 'fail'",
                        "ROLLBACK, 'back'",
                    ]);
                    let w = self.expr(&scope, 2);
                    format!("SELECT RAISE({what}) WHERE {w}")
                }
                _ => {
                    let e = self.expr(&scope, 2);
                    format!("SELECT {e}")
                }
            })
            .collect();
        sql.push_str(&format!(" BEGIN {}; END", body.join("; ")));
        sql
    }

    fn alter(&mut self) -> String {
        let Some(table) = self.any_table() else {
            return "ALTER TABLE t0 ADD COLUMN c9".into();
        };
        let name = ident(&table.name);
        let columns = Self::visible_columns(&table);
        let column = columns
            .choose(&mut self.rng)
            .map(|c| ident(&c.name))
            .unwrap_or_else(|| "c0".into());
        match self.rng.gen_range(0..6) {
            0 => format!("ALTER TABLE {name} RENAME TO t{}", self.rng.gen_range(0..6)),
            1 => format!(
                "ALTER TABLE {name} RENAME COLUMN {column} TO c{}",
                self.rng.gen_range(0..9)
            ),
            2 | 3 => {
                let refs: Vec<String> = columns.iter().map(|c| ident(&c.name)).collect();
                let column = format!("c{}", self.rng.gen_range(5..10));
                let def = self.column_def(&column, &refs);
                format!("ALTER TABLE {name} ADD COLUMN {def}")
            }
            4 => format!("ALTER TABLE {name} DROP COLUMN {column}"),
            _ => {
                // libSQL's own: change a column's definition.
                let refs: Vec<String> = columns.iter().map(|c| ident(&c.name)).collect();
                let bare = column.trim_matches('"').to_string();
                let def = self.column_def(&bare, &refs);
                format!("ALTER TABLE {name} ALTER COLUMN {column} TO {def}")
            }
        }
    }

    fn drop(&mut self) -> String {
        let exists = if self.chance(0.5) { "IF EXISTS " } else { "" };
        match self.rng.gen_range(0..5) {
            0 | 1 => {
                let t = self.table_name();
                let what = if t.starts_with('v') { "VIEW" } else { "TABLE" };
                format!("DROP {what} {exists}{}", ident(&t))
            }
            2 | 3 => {
                let i = match self.schema.indexes.choose(&mut self.rng) {
                    Some(i) => i.name.clone(),
                    None => "i0".into(),
                };
                format!("DROP INDEX {exists}{}", ident(&i))
            }
            _ => {
                let t = match self.schema.triggers.choose(&mut self.rng) {
                    Some(t) => t.clone(),
                    None => "tr0".into(),
                };
                format!("DROP TRIGGER {exists}{}", ident(&t))
            }
        }
    }

    fn transaction(&mut self) -> String {
        let s = format!("s{}", self.rng.gen_range(0..3));
        match self.rng.gen_range(0..10) {
            0 => "BEGIN".into(),
            1 => self
                .pick(&["BEGIN DEFERRED", "BEGIN IMMEDIATE", "BEGIN EXCLUSIVE"])
                .into(),
            2 | 3 => self.pick(&["COMMIT", "END", "ROLLBACK"]).into(),
            4 | 5 => format!("SAVEPOINT {s}"),
            6 => format!("RELEASE {s}"),
            7 => format!("ROLLBACK TO {s}"),
            _ => format!("RELEASE SAVEPOINT {s}"),
        }
    }

    fn maintenance(&mut self) -> Statement {
        match self.rng.gen_range(0..6) {
            0 => Statement {
                vacuum: true,
                ..Statement::schema("VACUUM".into())
            },
            1 => Statement::schema("ANALYZE".into()),
            2 => {
                let t = self.table_name();
                Statement::schema(format!("ANALYZE {}", ident(&t)))
            }
            3 => Statement::schema("REINDEX".into()),
            4 => {
                let index = self.schema.indexes.choose(&mut self.rng).cloned();
                let target = match index {
                    Some(i) if self.chance(0.6) => ident(&i.name),
                    _ => self.pick(&["NOCASE", "BINARY", "RTRIM", "t0"]).to_string(),
                };
                Statement::schema(format!("REINDEX {target}"))
            }
            _ => Statement::schema("ANALYZE sqlite_schema".into()),
        }
    }

    fn pragma(&mut self) -> String {
        if self.chance(0.4) {
            let t = self.table_name();
            let p = self.pick(&[
                "table_info",
                "table_xinfo",
                "index_list",
                "index_info",
                "index_xinfo",
                "foreign_key_list",
                "foreign_key_check",
                "integrity_check",
                "quick_check",
            ]);
            let arg = if p.starts_with("index_i") || p.starts_with("index_x") {
                match self.schema.indexes.choose(&mut self.rng) {
                    Some(i) => ident(&i.name),
                    None => ident(&t),
                }
            } else {
                ident(&t)
            };
            return format!("PRAGMA {p}({arg})");
        }
        self.pick(PRAGMAS).to_string()
    }
}

/// Reads the generator's schema from the rows of [`SCHEMA_QUERY`].
pub fn schema_from_rows(rows: Vec<SchemaRow>) -> Schema {
    let mut schema = Schema::default();
    for row in rows {
        let sql_lower = row.sql.as_deref().unwrap_or("").to_ascii_lowercase();
        match row.kind.as_str() {
            "table" | "view" => {
                let position = schema
                    .tables
                    .iter()
                    .position(|t| t.name == row.name && t.database == row.database);
                let index = match position {
                    Some(i) => i,
                    None => {
                        let kind = if row.kind == "view" {
                            TableKind::View
                        } else if sql_lower.starts_with("create virtual table") {
                            let module =
                                sql_lower.split(" using ").nth(1).unwrap_or("").trim_start();
                            if module.starts_with("fts5") {
                                TableKind::Fts5
                            } else if module.starts_with("fts") {
                                TableKind::Fts3
                            } else if module.starts_with("rtree") {
                                TableKind::Rtree
                            } else if module.starts_with("geopoly") {
                                TableKind::Geopoly
                            } else {
                                TableKind::OtherVirtual
                            }
                        } else {
                            TableKind::Plain
                        };
                        schema.tables.push(Table {
                            name: row.name.clone(),
                            database: row.database.clone(),
                            kind,
                            columns: Vec::new(),
                        });
                        schema.tables.len() - 1
                    }
                };
                if let Some(name) = row.column {
                    schema.tables[index].columns.push(Column {
                        name,
                        ty: row.column_type.unwrap_or_default(),
                        hidden: row.hidden != 0,
                    });
                }
            }
            "index" => schema.indexes.push(Index {
                name: row.name,
                table: row.table,
                vector: sql_lower.contains("libsql_vector_idx"),
            }),
            "trigger" => schema.triggers.push(row.name),
            _ => {}
        }
    }
    schema
}

/// One row of [`SCHEMA_QUERY`].
pub struct SchemaRow {
    pub database: String,
    pub kind: String,
    pub name: String,
    pub table: String,
    pub sql: Option<String>,
    pub column: Option<String>,
    pub column_type: Option<String>,
    pub hidden: i64,
}

/// What the runner reads the schema with after a statement that may have changed it: an
/// ordinary statement a tenant may send (it is logged and run like the others).
pub const SCHEMA_QUERY: &str = "SELECT 'main', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM main.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'main') AS p WHERE m.name NOT LIKE 'sqlite_%' UNION ALL SELECT 'temp', m.type, m.name, m.tbl_name, m.sql, p.name, p.type, coalesce(p.hidden, 0) FROM temp.sqlite_schema AS m LEFT JOIN pragma_table_xinfo(m.name, 'temp') AS p";

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn functions() -> Arc<[Function]> {
        vec![
            Function {
                name: "abs".into(),
                narg: 1,
                kind: 's',
            },
            Function {
                name: "printf".into(),
                narg: -1,
                kind: 's',
            },
            Function {
                name: "count".into(),
                narg: 1,
                kind: 'a',
            },
            Function {
                name: "row_number".into(),
                narg: 0,
                kind: 'w',
            },
        ]
        .into()
    }

    #[test]
    fn statements_are_one_line_and_reproducible() {
        let run = |seed| {
            let mut g = Generator::new(StdRng::seed_from_u64(seed), functions());
            (0..2000).map(|_| g.statement().sql).collect::<Vec<_>>()
        };
        let a = run(7);
        assert_eq!(a, run(7));
        assert_ne!(a, run(8));
        for sql in &a {
            assert!(!sql.contains('\n') && !sql.contains('\r'), "{sql}");
            assert!(!sql.trim().is_empty());
        }
    }

    #[test]
    fn the_schema_is_read_from_rows() {
        let row = |kind: &str, name: &str, sql: &str, column: Option<(&str, &str)>| SchemaRow {
            database: "main".into(),
            kind: kind.into(),
            name: name.into(),
            table: "t0".into(),
            sql: Some(sql.into()),
            column: column.map(|c| c.0.into()),
            column_type: column.map(|c| c.1.into()),
            hidden: 0,
        };
        let schema = schema_from_rows(vec![
            row(
                "table",
                "t0",
                "CREATE TABLE t0 (c0 F32_BLOB(3), c1)",
                Some(("c0", "F32_BLOB(3)")),
            ),
            row(
                "table",
                "t0",
                "CREATE TABLE t0 (c0 F32_BLOB(3), c1)",
                Some(("c1", "")),
            ),
            row(
                "table",
                "f0",
                "CREATE VIRTUAL TABLE f0 USING fts5(x0)",
                Some(("x0", "")),
            ),
            row(
                "index",
                "i0",
                "CREATE INDEX i0 ON t0(libsql_vector_idx(c0))",
                None,
            ),
        ]);
        assert_eq!(schema.tables.len(), 2);
        assert_eq!(schema.tables[0].columns.len(), 2);
        assert_eq!(
            schema.tables[0].columns[0].vector(),
            Some((VectorType::F32, 3))
        );
        assert_eq!(schema.tables[1].kind, TableKind::Fts5);
        assert!(schema.indexes[0].vector);
    }
}
