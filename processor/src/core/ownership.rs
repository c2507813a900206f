//! What an instance does with a partition it is told it no longer holds, and with one it
//! finished opening: the rules that keep a paused process (a zombie) from acting beside the
//! partition's new owner, and a broker outage from costing a partition its store.
//!
//! A static member's newest join wins its partitions back, so a zombie that rejoined would
//! take them from their owner: an instance that finds a newer owner's fence stops instead.
//! Its store may hold a batch that slipped through before it noticed (writes whose changelog
//! records do not count), so it forgets its checkpoint and is restored in full if the
//! partition comes back to it.

/// What becomes of a partition taken away (a rebalance) or lost (the session expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnRevoked {
    /// Closed, its store kept for a later return: a clean revocation, or an assignment lost
    /// with no newer fence (a broker outage fences nothing; the instance rejoins).
    Close,
    /// A newer owner fenced it after this instance's last changelog record: this instance is
    /// a zombie. The store is disowned and the process stops.
    Zombie,
}

/// The rule for one partition: `lost` when the session expired rather than a rebalance
/// revoking it; `fenced` whether a newer owner fenced it since this instance's last write
/// (`None`: not known, the changelog could not be read).
pub fn on_revoked(lost: bool, fenced: Option<bool>) -> OnRevoked {
    match (lost, fenced) {
        (true, Some(true)) => OnRevoked::Zombie,
        // Unknown is not a fence: stopping on every unreadable changelog would turn an
        // outage into a crash loop; a batch or the changelog watch finds a real fence later.
        _ => OnRevoked::Close,
    }
}

/// What becomes of a partition whose opening (restore, fence, journal) finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOpened {
    /// Still held: its store, timers and journaled triggers are installed.
    Install,
    /// Revoked, or the assignment lost, while it opened: it is the new owner's. Installing
    /// it would fire its timers and request its triggers beside that owner. Its store is
    /// disowned: a later return restores in full rather than trust an epoch the new owner
    /// has fenced.
    LeaveToNewOwner,
    /// A newer owner fenced it while it opened: this instance is a zombie and stops.
    Zombie,
}

/// The rule: `assigned` whether the consumer still holds the partition, and its assignment
/// was not lost; `fenced` whether the opening found a newer owner's fence after its own.
pub fn on_opened(assigned: bool, fenced: bool) -> OnOpened {
    match (fenced, assigned) {
        (true, _) => OnOpened::Zombie,
        (false, false) => OnOpened::LeaveToNewOwner,
        (false, true) => OnOpened::Install,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_lost_and_fenced_since_the_last_write_makes_a_zombie() {
        assert_eq!(on_revoked(true, Some(true)), OnRevoked::Zombie);
    }

    #[test]
    fn a_lost_assignment_nobody_fenced_closes_and_keeps_the_store() {
        // A broker outage: the session expired, but no other process took over.
        assert_eq!(on_revoked(true, Some(false)), OnRevoked::Close);
    }

    #[test]
    fn an_unreadable_changelog_is_not_taken_for_a_fence() {
        assert_eq!(on_revoked(true, None), OnRevoked::Close);
    }

    #[test]
    fn a_clean_revocation_closes_whatever_the_changelog_says() {
        // A rebalance hands the partition over in order: the fence is the new owner's
        // normal start, not a sign this instance was paused.
        for fenced in [Some(true), Some(false), None] {
            assert_eq!(on_revoked(false, fenced), OnRevoked::Close, "{fenced:?}");
        }
    }

    #[test]
    fn a_partition_opened_while_still_held_is_installed() {
        assert_eq!(on_opened(true, false), OnOpened::Install);
    }

    #[test]
    fn a_partition_revoked_while_it_opened_is_left_to_its_new_owner() {
        assert_eq!(on_opened(false, false), OnOpened::LeaveToNewOwner);
    }

    #[test]
    fn a_newer_fence_found_while_opening_makes_a_zombie_held_or_not() {
        assert_eq!(on_opened(true, true), OnOpened::Zombie);
        assert_eq!(on_opened(false, true), OnOpened::Zombie);
    }
}
