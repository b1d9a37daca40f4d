//! The server commands' logs: to stderr, as text (coloured only on a terminal) or as one
//! JSON object a line for log shippers.

use std::io::IsTerminal;

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines; colours only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object a line (`timestamp`, `level`, `target`, `fields`, `span`): for log
    /// shippers.
    Json,
}

/// Installs the process's log subscriber. `filter` is an `EnvFilter` directive; a bad one
/// falls back to `info`.
pub fn init(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        // Escape codes in a file or a pipe only get in the reader's way.
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
