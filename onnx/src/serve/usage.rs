//! What the process spends while serving: its CPU time, context switches and minor page
//! faults (`getrusage`), and its resident memory, now and at its peak.

/// What the process has spent so far, every thread's (ended ones included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Usage {
    pub(super) cpu_ns: u64,
    pub(super) voluntary: u64,
    pub(super) involuntary: u64,
    pub(super) minor_faults: u64,
}

impl Usage {
    /// `getrusage(RUSAGE_SELF)`; zeros where it is not known.
    pub(super) fn now() -> Usage {
        #[cfg(all(target_os = "linux", target_pointer_width = "64"))]
        {
            /// `struct rusage` on 64-bit Linux: two `timeval`s, then 14 `long`s.
            #[repr(C)]
            struct RUsage([i64; 18]);
            extern "C" {
                fn getrusage(who: i32, usage: *mut RUsage) -> i32;
            }
            let mut u = RUsage([0; 18]);
            // SAFETY: RUSAGE_SELF (0), and a writable struct of the kernel's layout and size.
            if unsafe { getrusage(0, &mut u) } == 0 {
                let f = u.0.map(|x| x.max(0) as u64);
                return Usage {
                    cpu_ns: (f[0] + f[2]) * 1_000_000_000 + (f[1] + f[3]) * 1_000,
                    minor_faults: f[8],
                    voluntary: f[16],
                    involuntary: f[17],
                };
            }
        }
        Usage::default()
    }

    /// What was spent since `before`.
    pub(super) fn since(self, before: Usage) -> Usage {
        Usage {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            voluntary: self.voluntary.saturating_sub(before.voluntary),
            involuntary: self.involuntary.saturating_sub(before.involuntary),
            minor_faults: self.minor_faults.saturating_sub(before.minor_faults),
        }
    }
}

/// The process's resident memory now, in bytes.
pub(super) fn rss_now() -> u64 {
    crate::measure::rss::status_kib("VmRSS:") * 1024
}

/// The process's peak resident memory so far, in bytes.
pub(super) fn rss_peak() -> u64 {
    crate::measure::rss::status_kib("VmHWM:") * 1024
}
