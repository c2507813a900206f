//! Commands from `sluice.commands` (rerun, cancel).

use super::Decider;
use crate::core::records::{CommandKind, CommandRecord};

impl Decider<'_> {
    pub(super) fn on_command(&mut self, record: &CommandRecord) {
        // Reruns and cancellation belong to the full lifecycle; until then a command is
        // refused loudly rather than ignored.
        let name = match record.command {
            CommandKind::Rerun => "rerun",
            CommandKind::Cancel => "cancel",
        };
        let reason = format!("command {name:?} is not supported by this version of sluice");
        self.reject(&format!("command {name} for {}", record.date), &reason);
    }
}
