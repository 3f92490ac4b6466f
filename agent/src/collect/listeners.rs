//! The TCP ports listening in the node's network namespace: `<root>/proc/1/net/tcp` and
//! `tcp6`, the tables of the host's init process's namespace, read through the `/proc` mount
//! the agent has anyway (no new privilege). proc_net(5): after a header line, one socket a
//! line, `sl local_address rem_address st ...`, the local address `ADDR:PORT` in hexadecimal
//! and the state `0A` for `LISTEN`.

use nodemedic_rules::snapshot::{Listener, Observed};

use super::read::read_text;
use crate::host::HostPaths;

/// `/proc/net/tcp` of a busy node is a few hundred KiB (150 bytes a socket).
const TABLE_LIMIT: u64 = 32 * 1024 * 1024;

/// Why a line of the table is not a socket.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TableError {
    pub line: usize,
    pub reason: &'static str,
}

/// The listening ports of a `/proc/net/tcp` or `tcp6` text.
pub fn parse_tcp_table(text: &str, ipv6: bool) -> Result<Vec<Listener>, TableError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        let err = |reason| TableError { line: i + 1, reason };
        let mut fields = line.split_whitespace();
        let (Some(_slot), Some(local), Some(_remote), Some(state)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            if line.trim().is_empty() {
                continue;
            }
            return Err(err("fewer than four fields"));
        };
        if state != "0A" {
            continue;
        }
        let port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
            .ok_or_else(|| err("no hexadecimal port in the local address"))?;
        out.push(Listener { port, ipv6 });
    }
    Ok(out)
}

/// The listening sockets of the node's network namespace; `Missing` when `<root>/proc/1/net`
/// is not there (no host `/proc`).
pub fn read_listeners(host: &HostPaths) -> Observed<Vec<Listener>> {
    let net = host.proc().join("1/net");
    let mut all = Vec::new();
    for (file, ipv6) in [("tcp", false), ("tcp6", true)] {
        let path = net.join(file);
        let shown = host.shown(&path);
        match read_text(&path, &shown, TABLE_LIMIT) {
            // No tcp6 on a kernel without IPv6: only IPv4.
            Ok(None) if ipv6 => {}
            Ok(None) => {
                return Observed::Missing {
                    path: shown.to_string(),
                };
            }
            Err(e) => return Observed::Error { reason: e.to_string() },
            Ok(Some(text)) => match parse_tcp_table(&text, ipv6) {
                Ok(l) => all.extend(l),
                Err(e) => {
                    return Observed::Error {
                        reason: format!("{shown}: {e}"),
                    };
                }
            },
        }
    }
    all.sort();
    all.dedup();
    Observed::Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as the kernel writes them (`net/ipv4/tcp_ipv4.c` `get_tcp4_sock`).
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1CA1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 22817 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:2717 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 23011 1 0000000000000000 100 0 0 10 0\n\
   2: 0A000311:0016 0A000301:D2A6 01 00000000:00000000 02:0009DA3B 00000000     0        0 41877 4 0000000000000000 20 4 30 10 -1\n";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000000000000:1CA1 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 22818 1 0000000000000000 100 0 0 10 0\n";

    #[test]
    fn listening_sockets_and_not_the_others() {
        assert_eq!(
            parse_tcp_table(TCP, false).unwrap(),
            [
                Listener {
                    port: 7329,
                    ipv6: false
                },
                Listener {
                    port: 10007,
                    ipv6: false
                }
            ]
        );
        assert_eq!(
            parse_tcp_table(TCP6, true).unwrap(),
            [Listener { port: 7329, ipv6: true }]
        );
        assert_eq!(parse_tcp_table("header only\n", false).unwrap(), []);
        assert_eq!(
            parse_tcp_table("h\n 0: 00000000:XYZW 00000000:0000 0A\n", false)
                .unwrap_err()
                .to_string(),
            "line 2: no hexadecimal port in the local address"
        );
        assert_eq!(
            parse_tcp_table("h\n 0: 00000000:1CA1\n", false)
                .unwrap_err()
                .to_string(),
            "line 2: fewer than four fields"
        );
    }

    #[test]
    fn both_tables_under_the_host_root_and_missing_without_them() {
        let dir = tempfile::tempdir().unwrap();
        let host = HostPaths::new(dir.path(), None);
        assert!(matches!(read_listeners(&host), Observed::Missing { path } if path == "/proc/1/net/tcp"));
        let net = dir.path().join("proc/1/net");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(net.join("tcp"), TCP).unwrap();
        // No tcp6 (a kernel without IPv6): IPv4 alone.
        assert_eq!(read_listeners(&host).ok().map(Vec::len), Some(2));
        std::fs::write(net.join("tcp6"), TCP6).unwrap();
        let Observed::Ok(all) = read_listeners(&host) else {
            panic!()
        };
        assert_eq!(all.iter().filter(|l| l.port == 7329).count(), 2);
        std::fs::write(net.join("tcp"), "h\n garbage\n").unwrap();
        assert!(
            matches!(read_listeners(&host), Observed::Error { reason } if reason.starts_with("/proc/1/net/tcp: line 2"))
        );
    }
}
