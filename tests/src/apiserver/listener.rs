//! The listening sockets, closable and re-openable on the same address for
//! [`super::Faults::set_refusing`].
//!
//! A [`ListenerSlot`] owns one port's listening socket. Closing it (dropping the socket) and
//! opening it again (binding the same address anew) are synchronous, so that when
//! `set_refusing` returns a `connect()` already sees the new state: ECONNREFUSED while
//! closed, a completed handshake once open again (the connection waits in the kernel's
//! backlog until the accept loop takes it).
//!
//! Binding the same port again right after closing works because the listening socket has
//! `SO_REUSEADDR` (set by both `std::net::TcpListener::bind` and tokio's `TcpListener::bind`
//! on Unix): without it, `bind` fails with EADDRINUSE while the connections the server closed
//! linger in TIME_WAIT on that port, or while accepted connections are still open on it.

use std::io;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

/// The lowest port [`bind_outside_ephemeral`] picks.
const LOWEST_PORT: u16 = 20000;

/// How many random ports [`bind_outside_ephemeral`] tries before it falls back to port 0.
const PORT_TRIES: usize = 64;

/// The kernel's range of ephemeral ports (`/proc/sys/net/ipv4/ip_local_port_range`, Linux's
/// default `32768 60999`), the ports it gives outgoing connections and binds to port 0.
pub(crate) fn ephemeral_port_range() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut numbers = text.split_whitespace().map(str::parse::<u16>);
    match (numbers.next(), numbers.next()) {
        (Some(Ok(low)), Some(Ok(high))) if low <= high => Some((low, high)),
        _ => None,
    }
}

/// A listening socket on `127.0.0.1` at a random port between [`LOWEST_PORT`] and the low end
/// of the ephemeral range. The kernel never hands such a port to an outgoing connection, so
/// when [`super::Faults::set_refusing`] closes the socket for a while, no connection of another
/// test running meanwhile can take the port, and binding it again succeeds. (A port 0 bind
/// would land in the ephemeral range, where that happens.) A port in use is retried with
/// another, [`PORT_TRIES`] times; after that, or without room below the range (a range
/// starting at or below 20001), it falls back to port 0 and says so on stderr.
pub(crate) fn bind_outside_ephemeral() -> io::Result<std::net::TcpListener> {
    let low = ephemeral_port_range().map_or(32768, |(low, _)| low);
    if low > LOWEST_PORT + 1 {
        let span = u64::from(low - LOWEST_PORT);
        for _ in 0..PORT_TRIES {
            let port = LOWEST_PORT + (super::util::random_u64() % span) as u16;
            match std::net::TcpListener::bind(("127.0.0.1", port)) {
                Ok(l) => {
                    l.set_nonblocking(true)?;
                    return Ok(l);
                }
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e),
            }
        }
    }
    eprintln!(
        "API server double: no free port found in {LOWEST_PORT}..{low} (below the ephemeral range) after \
         {PORT_TRIES} tries: listening on a kernel-chosen ephemeral port instead, which \
         Faults::set_refusing(false) may fail to bind again if an outgoing connection takes it meanwhile"
    );
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// How long [`ListenerSlot::open`] keeps retrying a `bind` that fails (the port taken in the
/// meantime, say as an ephemeral port of some outgoing connection).
const REBIND_PATIENCE: Duration = Duration::from_secs(2);

#[derive(Debug)]
enum Socket {
    /// Bound again by [`ListenerSlot::open`], outside any runtime; the accept loop registers
    /// it with its runtime on its next poll.
    Std(std::net::TcpListener),
    Tokio(TcpListener),
}

#[derive(Debug)]
struct SlotState {
    socket: Option<Socket>,
    /// Bumped by every close, so the accept loop learns of closes it slept through.
    closes: u64,
    /// Closed for good: the server is gone.
    retired: bool,
    /// The accept loop waiting on this slot.
    waker: Option<Waker>,
}

/// One listening port of the server.
#[derive(Debug)]
pub(crate) struct ListenerSlot {
    addr: SocketAddr,
    state: Mutex<SlotState>,
}

/// What the accept loop gets from [`ListenerSlot::poll_accept`].
#[derive(Debug)]
pub(crate) enum Accepted {
    Connection(TcpStream),
    /// The socket was closed since the last poll: the loop closes its connections.
    Closed,
    /// `accept` failed (out of file descriptors, say): the loop backs off.
    Failed,
}

impl ListenerSlot {
    pub fn new(listener: TcpListener) -> io::Result<ListenerSlot> {
        Ok(ListenerSlot {
            addr: listener.local_addr()?,
            state: Mutex::new(SlotState {
                socket: Some(Socket::Tokio(listener)),
                closes: 0,
                retired: false,
                waker: None,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the listening socket now: from here on connections to the port are refused.
    pub fn close(&self) {
        let mut st = self.state();
        if st.socket.take().is_some() {
            st.closes += 1;
        }
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// Closes the socket for good; [`ListenerSlot::open`] does nothing afterwards.
    pub fn retire(&self) {
        self.state().retired = true;
        self.close();
    }

    /// Listens on the same address again, if closed. Retries a failing `bind` for a while,
    /// then panics: the server cannot come back on its port.
    pub fn open(&self) {
        if self.state().socket.is_some() {
            return;
        }
        let listener = bind_again(self.addr).unwrap_or_else(|e| {
            panic!(
                "API server double: cannot listen on {} again after refusing connections: {e}",
                self.addr
            )
        });
        let mut st = self.state();
        if st.retired || st.socket.is_some() {
            return;
        }
        st.socket = Some(Socket::Std(listener));
        if let Some(w) = st.waker.take() {
            w.wake();
        }
    }

    /// Accepts the next connection. `closes_seen` is the caller's count of the closes it has
    /// been told about. While the socket is closed this stays pending until it is opened.
    pub fn poll_accept(&self, cx: &mut Context<'_>, closes_seen: &mut u64) -> Poll<Accepted> {
        let mut st = self.state();
        if st.closes != *closes_seen {
            *closes_seen = st.closes;
            return Poll::Ready(Accepted::Closed);
        }
        if matches!(st.socket, Some(Socket::Std(_)))
            && let Some(Socket::Std(std_listener)) = st.socket.take()
        {
            match TcpListener::from_std(std_listener) {
                Ok(l) => st.socket = Some(Socket::Tokio(l)),
                // Only without a runtime, which the accept loop runs on.
                Err(_) => return Poll::Ready(Accepted::Failed),
            }
        }
        if let Some(Socket::Tokio(l)) = &st.socket
            && let Poll::Ready(r) = l.poll_accept(cx)
        {
            return Poll::Ready(match r {
                Ok((stream, _)) => Accepted::Connection(stream),
                Err(_) => Accepted::Failed,
            });
        }
        st.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// Binds and listens on `addr` as `std::net::TcpListener::bind` does (with `SO_REUSEADDR` on
/// Unix), non-blocking for tokio.
fn bind_again(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let deadline = Instant::now() + REBIND_PATIENCE;
    loop {
        match std::net::TcpListener::bind(addr) {
            Ok(l) => {
                l.set_nonblocking(true)?;
                return Ok(l);
            }
            Err(e) if e.kind() == io::ErrorKind::AddrInUse && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// Closing a server-side connection first leaves it in TIME_WAIT on the listening port;
    /// binding the port again must still work (that is what `SO_REUSEADDR` is for).
    #[test]
    fn rebinds_the_same_port_over_time_wait_and_open_connections() {
        let first = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = first.local_addr().unwrap();
        // One connection the server closes first (TIME_WAIT on the server's port) ...
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        let (server_side, _) = first.accept().unwrap();
        drop(server_side);
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        drop(client);
        // ... and one still open.
        let mut open_client = std::net::TcpStream::connect(addr).unwrap();
        let (mut open_server, _) = first.accept().unwrap();
        drop(first);
        assert_eq!(
            std::net::TcpStream::connect(addr).unwrap_err().kind(),
            io::ErrorKind::ConnectionRefused
        );
        let again = bind_again(addr).expect("bind the same port again");
        assert_eq!(again.local_addr().unwrap(), addr);
        assert!(std::net::TcpStream::connect(addr).is_ok());
        // The connection accepted by the old socket is unaffected.
        open_client.write_all(b"x").unwrap();
        open_server.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"x");
    }

    #[test]
    fn ports_are_below_the_ephemeral_range() {
        let (low, high) = ephemeral_port_range().expect("Linux has /proc/sys/net/ipv4/ip_local_port_range");
        assert!(low <= high);
        let listeners: Vec<std::net::TcpListener> = (0..8).map(|_| bind_outside_ephemeral().unwrap()).collect();
        for l in &listeners {
            let port = l.local_addr().unwrap().port();
            assert!(
                (LOWEST_PORT..low).contains(&port),
                "port {port} not in {LOWEST_PORT}..{low}"
            );
        }
    }
}
