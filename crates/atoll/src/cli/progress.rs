//! Progress of long transfers (imports, exports, piped SQL), on stderr.
//!
//! On a terminal it is an `indicatif` bar: bytes, rate and ETA. When stderr is not a
//! terminal indicatif draws nothing at all, which would leave CI logs and scripts blind
//! during a long import; there we print a plain line at every 10% (or every 8 MiB when the
//! total is unknown) and one at the end, each with the bytes so far and the rate.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Without a known total, a plain line every this many bytes.
const PLAIN_STEP_UNKNOWN_TOTAL: u64 = 8 << 20;

#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

enum Inner {
    Bar(ProgressBar),
    Lines(Mutex<Lines>),
}

struct Lines {
    label: String,
    total: Option<u64>,
    started: Instant,
    /// The next position (percent with a total, bytes without) that earns a line.
    next_mark: u64,
    finished: bool,
}

impl Progress {
    /// Progress of moving `total` bytes (when known), labelled like `Uploading shop.db`.
    pub fn new(label: &str, total: Option<u64>) -> Progress {
        let inner = if std::io::stderr().is_terminal() {
            let bar = match total {
                Some(total) => {
                    let bar =
                        ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{msg} [{bar:30}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA {eta}",
                        )
                        .expect("valid template")
                        .progress_chars("=> "),
                    );
                    bar
                }
                None => {
                    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
                    bar.set_style(
                        ProgressStyle::with_template(
                            "{spinner} {msg} {decimal_bytes} {decimal_bytes_per_sec}",
                        )
                        .expect("valid template"),
                    );
                    bar
                }
            };
            bar.set_message(label.to_string());
            Inner::Bar(bar)
        } else {
            Inner::Lines(Mutex::new(Lines {
                label: label.to_string(),
                total,
                started: Instant::now(),
                next_mark: match total {
                    Some(_) => 10,
                    None => PLAIN_STEP_UNKNOWN_TOTAL,
                },
                finished: false,
            }))
        };
        Progress {
            inner: Arc::new(inner),
        }
    }

    /// Progress of work whose size the CLI cannot see (the server loading a dump): a
    /// spinner with the time so far on a terminal; elsewhere nothing until `finish_waiting`
    /// prints its one line.
    pub fn waiting(label: &str) -> Progress {
        let inner = if std::io::stderr().is_terminal() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
            );
            bar.set_message(label.to_string());
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            Inner::Bar(bar)
        } else {
            Inner::Lines(Mutex::new(Lines {
                label: label.to_string(),
                total: None,
                started: Instant::now(),
                next_mark: u64::MAX,
                finished: false,
            }))
        };
        Progress {
            inner: Arc::new(inner),
        }
    }

    /// Ends a [`Progress::waiting`] display with one line: the label and the time taken.
    pub fn finish_waiting(&self) {
        let (label, elapsed) = match &*self.inner {
            Inner::Bar(bar) => {
                bar.finish_and_clear();
                (bar.message().to_string(), bar.elapsed().as_secs_f64())
            }
            Inner::Lines(lines) => {
                let mut lines = lines.lock().expect("progress lock");
                if lines.finished {
                    return;
                }
                lines.finished = true;
                (lines.label.clone(), lines.started.elapsed().as_secs_f64())
            }
        };
        eprintln!("{label}: done in {elapsed:.1} s");
    }

    /// Bytes done so far. It may go back (a retried chunk is counted again from its start).
    pub fn set_position(&self, done: u64) {
        match &*self.inner {
            Inner::Bar(bar) => bar.set_position(done),
            Inner::Lines(lines) => {
                let mut lines = lines.lock().expect("progress lock");
                lines.advance(done);
            }
        }
    }

    /// Ends the progress display with a summary of `done` bytes.
    pub fn finish(&self, done: u64) {
        match &*self.inner {
            Inner::Bar(bar) => {
                bar.set_position(done);
                bar.finish_and_clear();
                let elapsed = bar.elapsed().as_secs_f64();
                eprintln!(
                    "{}: {} in {elapsed:.1} s ({}/s)",
                    bar.message(),
                    megabytes(done),
                    megabytes(rate(done, elapsed))
                );
            }
            Inner::Lines(lines) => {
                let mut lines = lines.lock().expect("progress lock");
                if !lines.finished {
                    lines.finished = true;
                    let elapsed = lines.started.elapsed().as_secs_f64();
                    eprintln!(
                        "{}: done, {} in {elapsed:.1} s ({}/s)",
                        lines.label,
                        megabytes(done),
                        megabytes(rate(done, elapsed))
                    );
                }
            }
        }
    }

    /// Removes the bar without a summary (the operation failed; its error says why).
    pub fn abandon(&self) {
        if let Inner::Bar(bar) = &*self.inner {
            bar.finish_and_clear();
        }
    }
}

impl Lines {
    fn advance(&mut self, done: u64) {
        if self.finished {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        match self.total {
            Some(total) if total > 0 => {
                let percent = done.saturating_mul(100) / total;
                if percent < self.next_mark || percent >= 100 {
                    // 100% is said by `finish`, with the final figures.
                    return;
                }
                eprintln!(
                    "{}: {percent}% ({} of {}, {}/s)",
                    self.label,
                    megabytes(done),
                    megabytes(total),
                    megabytes(rate(done, elapsed))
                );
                self.next_mark = (percent / 10 + 1) * 10;
            }
            _ => {
                if done < self.next_mark {
                    return;
                }
                eprintln!(
                    "{}: {} ({}/s)",
                    self.label,
                    megabytes(done),
                    megabytes(rate(done, elapsed))
                );
                self.next_mark = (done / PLAIN_STEP_UNKNOWN_TOTAL + 1) * PLAIN_STEP_UNKNOWN_TOTAL;
            }
        }
    }
}

fn rate(bytes: u64, seconds: f64) -> u64 {
    if seconds <= 0.0 {
        return 0;
    }
    (bytes as f64 / seconds) as u64
}

/// Bytes in decimal megabytes with one decimal, the unit people compare file sizes in
/// (kilobytes below one megabyte, so small files do not read as `0.0 MB`).
pub fn megabytes(bytes: u64) -> String {
    if bytes < 1_000_000 {
        format!("{:.1} kB", bytes as f64 / 1_000.0)
    } else {
        format!("{:.1} MB", bytes as f64 / 1_000_000.0)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn megabytes_read_like_file_sizes() {
        assert_eq!(super::megabytes(52_428_800), "52.4 MB");
        assert_eq!(super::megabytes(4096), "4.1 kB");
    }
}
