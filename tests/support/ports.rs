//! A port for a child process to listen on (`support::ports::free_port`), for the support
//! modules and tests that hand ports to children: one definition, one counter per process.
//!
//! Why not "bind 127.0.0.1:0, read the port, release it": the kernel hands the released port to
//! the next `bind(…:0)` or outgoing connection of any test running beside us, often before the
//! child (metrics-server, etcd, Prometheus, ...) has started and bound it. The child then dies
//! with "address already in use" or, worse, a client talks to the wrong server. So ports come
//! from *below* the kernel's ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), where
//! the kernel never picks, each handed out once per process, starting at an offset of the pid
//! so that two test processes side by side do not walk the same ports. A port still taken by
//! some other program is passed over (it is bound once to check).

/// A 127.0.0.1 port outside the kernel's ephemeral range, free a moment ago and never handed
/// out before by this process.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let (lo, hi) = port_pool();
    let size = u32::from(hi - lo);
    let start = std::process::id().wrapping_mul(7919) % size;
    for _ in 0..size {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = lo + ((start + n) % size) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free 127.0.0.1 port in {lo}..{hi} (outside the kernel's ephemeral range)");
}

/// The ports [`free_port`] takes from: below the ephemeral range when it leaves room there
/// (Linux's default 32768–60999 leaves 10000–32767), else above it.
fn port_pool() -> (u16, u16) {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|w| w.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        });
    match range {
        Some((eph_lo, _)) if eph_lo >= 12_000 => (10_000, eph_lo),
        Some((_, eph_hi)) if eph_hi <= 63_000 => (eph_hi + 1, 65_535),
        // An ephemeral range that covers nearly everything: no port is safe from the kernel;
        // the check bind still keeps a port another program holds from being handed out.
        _ => (10_000, 65_535),
    }
}
