//! SIGINT, SIGTERM and SIGHUP while a repair holds the kubelet stopped: recorded instead of
//! ending the process, so the repair can finish or undo its step and start the kubelet again
//! before it exits (a cut `kubectl exec` session sends SIGHUP; Ctrl-C sends SIGINT; a pod's
//! deletion sends SIGTERM). SIGKILL cannot be caught: the guard timer covers that.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// Why [`Interrupts::install`] could not take over the signals (they then end the process as
/// usual).
#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    /// The thread that waits for the signals could not be started.
    #[error("signal handlers: {0}")]
    Thread(#[source] std::io::Error),
    /// That thread's runtime could not be built.
    #[error("signal handlers: {0}")]
    Runtime(#[source] std::io::Error),
    /// The handlers of SIGINT, SIGTERM or SIGHUP could not be registered.
    #[error("signal handlers: cannot install them")]
    Handlers,
    /// The thread did not report within 5 s.
    #[error("signal handlers: not installed within 5 s")]
    Timeout,
}

/// The signals received since [`Interrupts::install`]: the last one wins.
#[derive(Debug, Clone)]
pub struct Interrupts {
    last: Arc<AtomicI32>,
}

impl Interrupts {
    /// From now on SIGINT, SIGTERM and SIGHUP are recorded here and no longer end the process.
    /// A thread of its own waits for them, so the repair's blocking steps need not poll.
    pub fn install() -> Result<Self, InterruptError> {
        let last = Arc::new(AtomicI32::new(0));
        let seen = last.clone();
        let (ready, installed) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("nodemedic-signals".into())
            .spawn(move || {
                let runtime = match crate::runtime() {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready.send(Err(InterruptError::Runtime(e)));
                        return;
                    }
                };
                runtime.block_on(async move {
                    use tokio::signal::unix::{SignalKind, signal};
                    let handlers = (
                        signal(SignalKind::interrupt()),
                        signal(SignalKind::terminate()),
                        signal(SignalKind::hangup()),
                    );
                    let (mut int, mut term, mut hup) = match handlers {
                        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
                        _ => {
                            let _ = ready.send(Err(InterruptError::Handlers));
                            return;
                        }
                    };
                    let _ = ready.send(Ok(()));
                    loop {
                        let number = tokio::select! {
                            _ = int.recv() => 2,
                            _ = term.recv() => 15,
                            _ = hup.recv() => 1,
                        };
                        seen.store(number, Ordering::SeqCst);
                        tracing::warn!(
                            signal = signal_name(number),
                            "signal received during the repair: finishing the step in progress, starting the kubelet \
                             again, then exiting"
                        );
                    }
                });
            })
            .map_err(InterruptError::Thread)?;
        match installed.recv_timeout(Duration::from_secs(5)) {
            Ok(Ok(())) => Ok(Interrupts { last }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(InterruptError::Timeout),
        }
    }

    /// The last signal received (`SIGTERM`, ...), if any.
    pub fn received(&self) -> Option<&'static str> {
        match self.last.load(Ordering::SeqCst) {
            0 => None,
            n => Some(signal_name(n)),
        }
    }
}

fn signal_name(number: i32) -> &'static str {
    match number {
        1 => "SIGHUP",
        2 => "SIGINT",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_recorded_not_fatal() {
        let interrupts = Interrupts::install().unwrap();
        assert_eq!(interrupts.received(), None);
        nix::sys::signal::raise(nix::sys::signal::Signal::SIGHUP).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while interrupts.received().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // Still here: SIGHUP's default action would have ended the test process.
        assert_eq!(interrupts.received(), Some("SIGHUP"));
    }

    #[test]
    fn install_errors_say_what_failed() {
        assert_eq!(
            InterruptError::Timeout.to_string(),
            "signal handlers: not installed within 5 s"
        );
        assert_eq!(
            InterruptError::Handlers.to_string(),
            "signal handlers: cannot install them"
        );
        assert_eq!(
            InterruptError::Runtime(std::io::Error::other("no epoll")).to_string(),
            "signal handlers: no epoll"
        );
    }
}
