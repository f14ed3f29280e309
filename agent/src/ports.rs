//! The TCP ports of the `MASTER_PORT` range bound on this node, from `/proc/net/tcp` and
//! `tcp6`: sent with every heartbeat, so the planner chooses a job's `MASTER_PORT` among
//! the free ones (another user binding a job's default port first made the job fail, or
//! let them answer its rendezvous).

use std::io::Read;
use std::path::Path;

use hyperplan_shared::taskenv::{MASTER_PORT_SPAN, in_master_range};

/// Most bytes read of one table: a node with a million sockets is not worth more.
const MAX_TABLE: u64 = 64 << 20;
/// `st` of a socket that holds no port for a new bind with `SO_REUSEADDR` (TIME_WAIT,
/// CLOSE).
const RELEASED: [u8; 2] = [0x06, 0x07];

/// The ports of the range bound under `net` (`/proc/net`), sorted; none when the tables
/// cannot be read.
pub fn in_use(net: &Path) -> Vec<u16> {
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let mut text = String::new();
        let read = std::fs::File::open(net.join(table)).and_then(|f| f.take(MAX_TABLE).read_to_string(&mut text));
        if read.is_ok() {
            ports.extend(parse(&text));
        }
    }
    ports.sort_unstable();
    ports.dedup();
    ports.truncate(usize::from(MASTER_PORT_SPAN));
    ports
}

/// The local ports of the range in one `/proc/net/tcp`-style table (its header skipped).
fn parse(text: &str) -> impl Iterator<Item = u16> + '_ {
    text.lines().skip(1).filter_map(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1)?;
        let state = u8::from_str_radix(fields.nth(1)?, 16).ok()?;
        let port = u16::from_str_radix(local.rsplit_once(':')?.1, 16).ok()?;
        (in_master_range(port) && !RELEASED.contains(&state)).then_some(port)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:7332 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 1 1 0 100 0 0 10 0
   1: 0100007F:7333 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0 100 0 0 10 0
   2: 0100007F:7334 0100007F:9C41 06 00000000:00000000 00:00000000 00000000     0        0 0 3 0 0
   3: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
   4: garbage
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:76C3 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4 1 0 100 0 0 10 0
";

    #[test]
    fn listening_and_connected_ports_of_the_range_count_time_wait_does_not() {
        // As written, 0x7332.. (29490..) are below the range.
        let ports: Vec<u16> = parse(TCP).collect();
        assert!(ports.is_empty(), "{ports:?}");
        let dir = tempfile::tempdir().unwrap();
        let tcp = TCP
            .replace(":7332", ":733C")
            .replace(":7333", ":733D")
            .replace(":7334", ":733E");
        std::fs::write(dir.path().join("tcp"), tcp).unwrap();
        std::fs::write(dir.path().join("tcp6"), TCP6).unwrap();
        // 0x733C = 29500 listens, 0x733D = 29501 is connected, 0x733E = 29502 in TIME_WAIT;
        // 0x76C3 = 30403 listens on IPv6; port 22 is outside the range.
        assert_eq!(in_use(dir.path()), [29500, 29501, 30403]);
        assert!(in_use(&dir.path().join("nothing")).is_empty());
    }

    #[test]
    fn this_machines_tables_parse() {
        let ports = in_use(Path::new("/proc/net"));
        assert!(ports.iter().all(|&p| in_master_range(p)));
    }
}
