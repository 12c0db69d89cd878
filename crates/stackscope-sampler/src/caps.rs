//! The sampler's caches of what the target keeps generating (interned function and file names,
//! decoded code objects): each has a cap, and a cache that reaches its cap is emptied and fills
//! again with what the target runs now (one reload of its live code). That is never silent:
//! each time is counted here, with the entries it let go, and the sampler adds the counts to
//! its statistics ([`crate::SamplerStats::caps_reached`]) for the recording to say once.
//!
//! Tables of threads and processes are not capped this way: what a thread or process that ended
//! held is released at the read that finds it gone, so those tables hold what is alive.

/// How often caches reached their caps, and the entries they let go then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CapHits {
    pub reached: u64,
    pub evicted: u64,
}

impl CapHits {
    /// A cache holding `entries` reached its cap and was emptied.
    pub(crate) fn hit(&mut self, entries: usize) {
        self.reached += 1;
        self.evicted += entries as u64;
    }

    pub(crate) fn add(&mut self, other: CapHits) {
        self.reached += other.reached;
        self.evicted += other.evicted;
    }

    /// The counts so far, leaving zero behind: each count is handed on once.
    pub(crate) fn take(&mut self) -> CapHits {
        std::mem::take(self)
    }
}

/// What to say once, in the terminal and in `summary.json`'s notices, when the sampler's caches
/// reached their caps `reached` times (letting `evicted` entries go); `None` when they never did.
pub fn cap_notice(reached: u64, evicted: u64) -> Option<String> {
    (reached > 0).then(|| {
        format!(
            "the sampler's caches of the target's code (names, files, code objects) reached \
             their caps {reached} time(s) and let {evicted} entries go, read again as needed: \
             the target keeps generating code (exec, compile, reloads); stacks are unaffected, \
             reading them costs more"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_reached_is_counted_once_and_said() {
        let mut caps = CapHits::default();
        assert_eq!(cap_notice(caps.reached, caps.evicted), None);
        caps.hit(100);
        caps.add(CapHits {
            reached: 1,
            evicted: 5,
        });
        assert_eq!(
            caps.take(),
            CapHits {
                reached: 2,
                evicted: 105
            }
        );
        assert_eq!(caps, CapHits::default());
        let said = cap_notice(2, 105).unwrap_or_default();
        assert!(
            said.contains("2 time(s)") && said.contains("105 entries"),
            "{said}"
        );
    }
}
