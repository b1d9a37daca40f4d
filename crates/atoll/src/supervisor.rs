//! The supervisor of `atoll dev` and `atoll node`: a small parent that binds the listeners,
//! starts the serving process (the same binary, same arguments) and starts it again within
//! a second when it dies of a crash, so a bug in the engine (C, in the process) costs the
//! node's tenants a second or two instead of their availability until someone restarts it.
//! With the crash journal (`atoll_data::crash_journal`) the statement that crashed it is
//! then refused, so no tenant can crash-loop the node.
//!
//! - **The listeners belong to the supervisor.** It binds them before the first start and
//!   hands them down (inherited descriptors, named in `ATOLL_INHERITED_LISTENERS`), so the
//!   ports never change (`--db-listen 127.0.0.1:0` included) and connections made while the
//!   serving process restarts wait in the kernel's backlog instead of being refused.
//! - **What counts as a crash**: death by a signal the supervisor did not send (abort on a
//!   corrupted heap, a segmentation fault, the OOM killer's SIGKILL) or a panic's exit code
//!   (101). Any other exit ends the supervisor with the same code: a start that fails for
//!   its configuration must not loop.
//! - **Restarts back off** when crashes come quickly: at once, then 0.25 s, 0.5 s, … up to
//!   10 s while the serving process keeps dying within a minute of its start.
//! - **Signals**: SIGTERM and SIGINT are passed on; the serving process ends within its
//!   shutdown bound, and is killed if it has not after [`STOP_WITHIN`] (whatever runs, an
//!   Atoll process ends within 10 s of SIGTERM; what it had committed is on its disk and is
//!   shipped at the next start). The serving process asks the
//!   kernel to kill it if the supervisor dies (a SIGKILLed supervisor leaves nothing behind).
//! - `--no-supervise` (`ATOLL_NO_SUPERVISE`) runs the server in one process, for operators
//!   whose service manager restarts it (systemd's `Restart=on-failure`).

use anyhow::Context;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

/// Names the listeners handed down: `--listen=3,--db-listen=4`.
const INHERITED: &str = "ATOLL_INHERITED_LISTENERS";
/// The supervisor's process id, in the serving process.
const SUPERVISED_BY: &str = "ATOLL_SUPERVISED_BY";
/// How many times the serving process was started again after a crash.
const RESTARTS: &str = "ATOLL_SERVING_RESTARTS";

/// How long the serving process has to stop after SIGTERM before it is killed.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// A panic that reached `main` ends the process with this code.
const PANIC_EXIT_CODE: i32 = 101;

/// A listener the supervisor binds for the serving process.
pub struct Listen<'a> {
    /// The flag that sets it (the key it is handed down by).
    pub flag: &'static str,
    pub address: SocketAddr,
    /// What it serves, for messages.
    pub what: &'a str,
}

/// In the supervisor: binds `listeners`, runs the serving process until it ends for good,
/// and answers the exit code to end with. In the serving process (or with supervision off):
/// `None`, and the caller serves.
pub async fn supervise(
    no_supervise: bool,
    listeners: &[Listen<'_>],
) -> anyhow::Result<Option<i32>> {
    if std::env::var_os(SUPERVISED_BY).is_some() {
        die_with_the_supervisor()?;
        return Ok(None);
    }
    if no_supervise {
        return Ok(None);
    }
    let mut bound = Vec::new();
    let mut names = Vec::new();
    for listen in listeners {
        let listener = bind(listen).await?;
        // Handed down: the descriptor must survive exec.
        rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty())?;
        names.push(format!(
            "{}={}",
            listen.flag,
            std::os::fd::AsRawFd::as_raw_fd(&listener)
        ));
        bound.push(listener);
    }
    let names = names.join(",");
    let program = std::env::current_exe().context("cannot find the atoll binary to supervise")?;
    let arguments: Vec<_> = std::env::args_os().skip(1).collect();

    let mut restarts: u32 = 0;
    let mut quick_crashes: u32 = 0;
    loop {
        let started = Instant::now();
        let child = std::process::Command::new(&program)
            .args(&arguments)
            .env(INHERITED, &names)
            .env(SUPERVISED_BY, std::process::id().to_string())
            .env(RESTARTS, restarts.to_string())
            .spawn()
            .context("cannot start the serving process")?;
        let pid = rustix::process::Pid::from_child(&child);
        let (status, stopping) = wait(child, pid).await?;
        if stopping {
            return Ok(Some(exit_code(status)));
        }
        let crashed = status.signal().is_some() || status.code() == Some(PANIC_EXIT_CODE);
        if !crashed {
            return Ok(Some(exit_code(status)));
        }
        restarts += 1;
        quick_crashes = if started.elapsed() < Duration::from_secs(60) {
            quick_crashes + 1
        } else {
            1
        };
        let delay = if quick_crashes <= 1 {
            Duration::ZERO
        } else {
            Duration::from_millis(250 << (quick_crashes - 2).min(6)).min(Duration::from_secs(10))
        };
        tracing::error!(
            status = %status,
            restarts,
            delay_ms = delay.as_millis() as u64,
            "the serving process crashed; starting it again"
        );
        tokio::time::sleep(delay).await;
    }
}

/// Binds one listener for the serving process. A port held by a process that is ending is
/// waited for a little: the serving process of a supervisor that was just killed dies a
/// moment after it (the kernel's death signal), still holding the ports, and a supervisor
/// started at once on the same ports must not fail for that.
async fn bind(listen: &Listen<'_>) -> anyhow::Result<std::net::TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match std::net::TcpListener::bind(listen.address) {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(crate::server::bind_error(
                    listen.address,
                    listen.what,
                    listen.flag,
                    e,
                ))
            }
        }
    }
}

/// Waits for the serving process, passing SIGTERM and SIGINT on; answers how it ended and
/// whether it was asked to stop.
async fn wait(
    mut child: std::process::Child,
    pid: rustix::process::Pid,
) -> anyhow::Result<(std::process::ExitStatus, bool)> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut exited = tokio::task::spawn_blocking(move || child.wait());
    let mut stopping = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    loop {
        let kill_timer = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            status = &mut exited => {
                let status = status.context("waiting for the serving process")??;
                return Ok((status, stopping));
            }
            _ = terminate.recv() => {
                stopping = true;
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                kill_at.get_or_insert(tokio::time::Instant::now() + STOP_WITHIN);
            }
            _ = interrupt.recv() => {
                stopping = true;
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
                kill_at.get_or_insert(tokio::time::Instant::now() + STOP_WITHIN);
            }
            _ = kill_timer => {
                tracing::error!("the serving process did not stop within 10 s of SIGTERM; killing it");
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                kill_at = None;
            }
        }
    }
}

/// The code the supervisor ends with: the serving process's, or 128 + its signal.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The serving process ends with its supervisor: the kernel kills it when the supervisor
/// dies (also by SIGKILL, which nothing can catch).
fn die_with_the_supervisor() -> anyhow::Result<()> {
    #[cfg(target_os = "linux")]
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    let expected = std::env::var(SUPERVISED_BY).ok();
    let parent = rustix::process::getppid().map(|pid| pid.as_raw_nonzero().get().to_string());
    if expected != parent {
        // The supervisor died before the request above took effect.
        anyhow::bail!("the supervisor of this process is gone");
    }
    Ok(())
}

/// In the serving process: the listener the supervisor bound for `flag`, if it bound one.
pub fn inherited_listener(flag: &str) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Ok(names) = std::env::var(INHERITED) else {
        return Ok(None);
    };
    let Some(fd) = names.split(',').find_map(|entry| {
        let (name, fd) = entry.split_once('=')?;
        (name == flag).then(|| fd.parse::<i32>().ok()).flatten()
    }) else {
        return Ok(None);
    };
    let listener = adopt(fd)?;
    listener.set_nonblocking(true)?;
    Ok(Some(tokio::net::TcpListener::from_std(listener)?))
}

/// Takes ownership of the listening socket the supervisor handed down as `fd`.
#[allow(unsafe_code)]
fn adopt(fd: i32) -> anyhow::Result<std::net::TcpListener> {
    use std::os::fd::FromRawFd;
    // The descriptor must be an open socket that nothing else in this process owns: check
    // it is a socket (fstat) before taking it; `inherited_listener` is called once per flag
    // at start, and the supervisor names each descriptor once.
    let stat = rustix::fs::fstat(
        // SAFETY: borrowed only for this call; `fstat` fails cleanly on a closed descriptor.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
    )
    .with_context(|| format!("the supervisor's listener {fd} is not open"))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::Socket {
        anyhow::bail!("the supervisor's listener {fd} is not a socket");
    }
    // SAFETY: an open socket (checked above) handed to this process by its supervisor for
    // this one listener, owned by nothing else here.
    Ok(unsafe { std::net::TcpListener::from_raw_fd(fd) })
}

/// In the serving process: reports how often it was started again (`/metrics`).
pub fn report_restarts() {
    let restarts: f64 = std::env::var(RESTARTS)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0);
    metrics::gauge!("atoll_serving_process_restarts").set(restarts);
    if restarts > 0.0 {
        tracing::warn!(restarts, "started again by the supervisor after a crash");
    }
}
