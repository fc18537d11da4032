//! Lines the disk refused, by run. A run whose lines could not be written (a full disk,
//! an I/O error) must not read as a short but complete log: its log ends with a note of
//! how many lines were dropped and why, and its final report's message says so too. The
//! note cannot go where the lines failed to go, so it is kept here, in memory, for the
//! most recent [`MAX_RUNS`] runs that lost lines.

use std::collections::{HashMap, VecDeque};
use std::fmt;

/// Runs whose losses are remembered; the oldest are forgotten first.
pub const MAX_RUNS: usize = 10_000;

/// What one run lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    pub lines: u64,
    /// The first error, in words ("No space left on device (os error 28)").
    pub reason: String,
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, were, them) = if self.lines == 1 {
            ("", "was", "it")
        } else {
            ("s", "were", "them")
        };
        write!(
            f,
            "{} line{s} of this run's log {were} dropped: writing {them} failed: {}",
            self.lines, self.reason
        )
    }
}

#[derive(Default)]
pub(super) struct Losses {
    by_run: HashMap<i64, Loss>,
    order: VecDeque<i64>,
}

impl Losses {
    pub(super) fn add(&mut self, run_id: i64, lines: u64, reason: &dyn fmt::Display) {
        if lines == 0 {
            return;
        }
        if let Some(loss) = self.by_run.get_mut(&run_id) {
            loss.lines += lines;
            return;
        }
        if self.order.len() >= MAX_RUNS
            && let Some(oldest) = self.order.pop_front()
        {
            self.by_run.remove(&oldest);
        }
        self.order.push_back(run_id);
        self.by_run.insert(
            run_id,
            Loss {
                lines,
                reason: reason.to_string(),
            },
        );
    }

    pub(super) fn get(&self, run_id: i64) -> Option<Loss> {
        self.by_run.get(&run_id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_by_run_keeps_the_first_reason_and_forgets_the_oldest() {
        let mut l = Losses::default();
        l.add(1, 3, &"disk full");
        l.add(1, 2, &"another");
        l.add(2, 0, &"nothing lost");
        assert_eq!(
            l.get(1),
            Some(Loss {
                lines: 5,
                reason: "disk full".into()
            })
        );
        assert_eq!(l.get(2), None);
        assert_eq!(
            l.get(1).unwrap().to_string(),
            "5 lines of this run's log were dropped: writing them failed: disk full"
        );
        for run in 10..10 + MAX_RUNS as i64 {
            l.add(run, 1, &"x");
        }
        assert_eq!(l.get(1), None, "the oldest is forgotten");
        assert!(l.get(10 + MAX_RUNS as i64 - 1).is_some());
    }
}
