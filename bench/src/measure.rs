//! What the harness reads off a running processor and the machine.

use std::alloc::{GlobalAlloc, Layout};
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::time::Duration;

/// p50, p99 and max of `samples` (milliseconds), or zeros for none.
pub fn percentiles(samples: &mut [f64]) -> (f64, f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.50), at(0.99), samples[samples.len() - 1])
}

/// GET over HTTP/1.1 on loopback: status and body.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    Some((status, body))
}

/// The sum of a metric's samples whose series contains `filter`, from `/metrics`.
pub fn metric(addr: &str, name: &str, filter: &str) -> f64 {
    let Some((_, body)) = http_get(addr, "/metrics") else {
        return 0.0;
    };
    body.lines()
        .filter(|l| l.starts_with(name) && l.contains(filter))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

/// Resident set size now and at its peak, in MiB, from /proc.
pub fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Bytes under `dir`.
pub fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// An allocator that can count the bytes its heap holds, for figures of what a value costs
/// (the history scenario's decoded states). Counting is off but within [`heap_held_by`]: the
/// timed scenarios pay one relaxed load per allocation.
pub struct Counting<A> {
    inner: A,
}

static COUNTING: AtomicBool = AtomicBool::new(false);
static HEAP: AtomicIsize = AtomicIsize::new(0);

impl<A> Counting<A> {
    pub const fn new(inner: A) -> Self {
        Counting { inner }
    }
}

fn counted(bytes: isize) {
    if COUNTING.load(Ordering::Relaxed) {
        HEAP.fetch_add(bytes, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed to `inner` unchanged; the counter only observes sizes.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size() as isize);
        unsafe { self.inner.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        counted(layout.size() as isize);
        unsafe { self.inner.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        counted(-(layout.size() as isize));
        unsafe { self.inner.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted(new_size as isize - layout.size() as isize);
        unsafe { self.inner.realloc(ptr, layout, new_size) }
    }
}

/// What `f` leaves allocated on the heap (bytes asked for, net of what it freed), with what
/// it returns: run while nothing else allocates.
pub fn heap_held_by<T>(f: impl FnOnce() -> T) -> (T, isize) {
    COUNTING.store(true, Ordering::Relaxed);
    let before = HEAP.load(Ordering::Relaxed);
    let value = f();
    let held = HEAP.load(Ordering::Relaxed) - before;
    COUNTING.store(false, Ordering::Relaxed);
    (value, held)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut samples: Vec<f64> = (1..=100).map(f64::from).rev().collect();
        assert_eq!(percentiles(&mut samples), (51.0, 99.0, 100.0));
        assert_eq!(percentiles(&mut []), (0.0, 0.0, 0.0));
    }
}
