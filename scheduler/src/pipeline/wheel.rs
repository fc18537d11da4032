//! The in-memory timing wheel the ring thread fires from.
//!
//! The scan loop claims everything due in the next few seconds and inserts it here; the
//! ring thread sleeps until [`Wheel::next_due`], calls [`Wheel::advance`] with the clock,
//! and hands what came out to the dispatch pools. A cancel of a task that already sits in
//! the wheel takes it out with [`Wheel::remove`]. This module owns only the data
//! structure — no clock, no thread, no lock — so it is tested and benchmarked on a
//! simulated clock (`benches/wheel.rs` runs it against `tokio-util`'s `DelayQueue` and a
//! binary heap).
//!
//! # Design
//!
//! A hashed timing wheel with 1 ms ticks. With `S` slots (a power of two), slot
//! `due & (S - 1)` holds the items due at the one tick of the window
//! `(current, current + S]` that maps to it, so every item of a slot has the same due
//! time and a slot is emptied in one go, without comparisons. Around it:
//!
//! - items due after the window wait in an ordered *overflow* (a `BTreeMap` by due time
//!   and insertion order) and move into their slot as the window reaches them — the
//!   scheduler's window (5 s) fits in the default 8192 slots, so this is the exception;
//! - items inserted already due (at or before `current`) wait in an *overdue* list and
//!   come out first at the next `advance`;
//! - a bitmap of non-empty slots lets `advance` and `next_due` skip empty slots 64 at a
//!   time, so a clock that jumped far ahead costs one pass over the bitmap, not one step
//!   per elapsed millisecond.
//!
//! `insert` is O(1) (O(log n) for the overflow), `advance` is O(items out + S/64), and
//! slot vectors are drained, not dropped, so a steady load allocates nothing.

use std::collections::BTreeMap;

/// The number of slots the scheduler uses: 8.192 s of 1 ms ticks, more than the 5 s scan
/// window, so claimed items never touch the overflow.
pub const DEFAULT_SLOTS: usize = 8192;

/// Fewer slots than one bitmap word would only waste the word.
const MIN_SLOTS: usize = 64;

/// 4 Mi slots (about 70 minutes at 1 ms): more would only cost memory.
const MAX_SLOTS: usize = 1 << 22;

/// A slot keeps the capacity of its vector between revolutions, up to this many items;
/// a one-off burst bigger than that gives its memory back.
const SLOT_KEEP_CAPACITY: usize = 1024;

/// A hashed timing wheel with 1 ms ticks; see the module docs.
#[derive(Debug)]
pub struct Wheel<T> {
    /// `slots[i]` holds the items due at the tick `t` of `(current, current + S]` with
    /// `t & mask == i`.
    slots: Box<[Vec<T>]>,
    /// Bit `i` is set exactly when `slots[i]` is not empty.
    occupied: Box<[u64]>,
    /// `S - 1`.
    mask: u64,
    /// Everything due at or before `current` has been handed out, except `overdue`.
    current: i64,
    /// Items inserted with a due time at or before `current`, in insertion order.
    overdue: Vec<(i64, T)>,
    /// The smallest due time in `overdue` (`i64::MAX` when empty).
    overdue_min: i64,
    /// Items due after `current + S`, by (due time, insertion number).
    overflow: BTreeMap<(i64, u64), T>,
    /// The next insertion number for `overflow`.
    next_seq: u64,
    len: usize,
}

impl<T> Wheel<T> {
    /// A wheel whose clock stands at `now_ms`, with `slots` rounded up to a power of two
    /// (at least 64, at most 4 Mi).
    pub fn new(now_ms: i64, slots: usize) -> Self {
        let slots = slots.clamp(MIN_SLOTS, MAX_SLOTS).next_power_of_two();
        Self {
            slots: (0..slots).map(|_| Vec::new()).collect(),
            occupied: vec![0; slots / 64].into_boxed_slice(),
            mask: slots as u64 - 1,
            current: now_ms,
            overdue: Vec::new(),
            overdue_min: i64::MAX,
            overflow: BTreeMap::new(),
            next_seq: 0,
            len: 0,
        }
    }

    /// The number of slots (one revolution, in milliseconds).
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The time of the last [`Wheel::advance`] (or of [`Wheel::new`]).
    pub fn current(&self) -> i64 {
        self.current
    }

    /// The number of items waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `item`, due at `due_ms`. An item due at or before the wheel's current time
    /// comes out at the next [`Wheel::advance`].
    pub fn insert(&mut self, due_ms: i64, item: T) {
        self.len += 1;
        if due_ms <= self.current {
            self.overdue_min = self.overdue_min.min(due_ms);
            self.overdue.push((due_ms, item));
        } else if due_ms <= self.horizon() {
            self.push_to_slot(due_ms, item);
        } else {
            self.overflow.insert((due_ms, self.next_seq), item);
            self.next_seq += 1;
        }
    }

    /// Moves every item due at or before `now_ms` into `out` as `(due, item)`, in
    /// non-decreasing due order (items due at the same millisecond in insertion order),
    /// and sets the wheel's time to `now_ms`.
    ///
    /// Each elapsed slot is visited at most once, and empty ones are skipped a bitmap word
    /// at a time, whatever the jump. A `now_ms` before the wheel's time (a clock that
    /// stepped back) only hands out overdue items; the wheel keeps its time.
    pub fn advance(&mut self, now_ms: i64, out: &mut Vec<(i64, T)>) {
        if !self.overdue.is_empty() {
            // Stable: equal due times stay in insertion order.
            self.overdue.sort_by_key(|(due, _)| *due);
            self.len -= self.overdue.len();
            // `append` leaves `overdue` empty with its capacity kept.
            out.append(&mut self.overdue);
            self.overdue_min = i64::MAX;
        }
        if now_ms <= self.current {
            return;
        }

        let horizon = self.horizon();
        let last = now_ms.min(horizon);
        // `current < now_ms`, so this cannot overflow.
        let mut tick = self.current + 1;
        while tick <= last {
            let Some(distance) = self.next_occupied(self.slot_of(tick)) else {
                break;
            };
            // An occupied slot is never behind `tick` (those were emptied above), so
            // `tick + distance` is its due time; past `last` means nothing more is due.
            let Some(due) = i64::try_from(distance)
                .ok()
                .and_then(|d| tick.checked_add(d))
            else {
                break;
            };
            if due > last {
                break;
            }
            self.drain_slot(due, out);
            let Some(next) = due.checked_add(1) else {
                break;
            };
            tick = next;
        }

        if now_ms > horizon {
            // The clock jumped past the whole window: what the overflow holds up to
            // `now_ms` is due too, and already in order.
            while let Some(entry) = self.overflow.first_entry() {
                if entry.key().0 > now_ms {
                    break;
                }
                let ((due, _), item) = entry.remove_entry();
                self.len -= 1;
                out.push((due, item));
            }
        }

        self.current = now_ms;
        self.refill_from_overflow();
    }

    /// The earliest due time in the wheel, for the ring thread to sleep until; at or
    /// before [`Wheel::current`] when something inserted overdue is waiting. O(S/64) at
    /// worst.
    pub fn next_due(&self) -> Option<i64> {
        if !self.overdue.is_empty() {
            return Some(self.overdue_min);
        }
        if let Some(first) = self.current.checked_add(1)
            && let Some(distance) = self.next_occupied(self.slot_of(first))
            && let Ok(distance) = i64::try_from(distance)
        {
            return Some(first + distance);
        }
        self.overflow.first_key_value().map(|((due, _), _)| *due)
    }

    /// Takes out the first item due at `due_ms` for which `matches` is true (a cancelled
    /// task). `None` if there is none, including when it already came out.
    pub fn remove(&mut self, due_ms: i64, mut matches: impl FnMut(&T) -> bool) -> Option<T> {
        let item = if due_ms <= self.current {
            let at = self
                .overdue
                .iter()
                .position(|(due, item)| *due == due_ms && matches(item))?;
            let (_, item) = self.overdue.remove(at);
            if due_ms == self.overdue_min {
                self.overdue_min = self
                    .overdue
                    .iter()
                    .map(|(due, _)| *due)
                    .min()
                    .unwrap_or(i64::MAX);
            }
            item
        } else if due_ms <= self.horizon() {
            let index = self.slot_of(due_ms);
            let slot = &mut self.slots[index];
            let at = slot.iter().position(&mut matches)?;
            let item = slot.remove(at);
            if slot.is_empty() {
                self.occupied[index / 64] &= !(1 << (index % 64));
            }
            item
        } else {
            let key = self
                .overflow
                .range((due_ms, 0)..=(due_ms, u64::MAX))
                .find(|(_, item)| matches(item))
                .map(|(key, _)| *key)?;
            self.overflow.remove(&key)?
        };
        self.len -= 1;
        Some(item)
    }

    /// The last tick the slots cover.
    fn horizon(&self) -> i64 {
        self.current.saturating_add_unsigned(self.mask + 1)
    }

    fn slot_of(&self, due_ms: i64) -> usize {
        // Two's complement: negative due times map consistently too. The mask keeps the
        // value below the slot count, which is a `usize`.
        (due_ms as u64 & self.mask) as usize
    }

    fn push_to_slot(&mut self, due_ms: i64, item: T) {
        let index = self.slot_of(due_ms);
        self.slots[index].push(item);
        self.occupied[index / 64] |= 1 << (index % 64);
    }

    /// Moves the items of the slot of tick `due` (all due at `due`) into `out`.
    fn drain_slot(&mut self, due: i64, out: &mut Vec<(i64, T)>) {
        let index = self.slot_of(due);
        let slot = &mut self.slots[index];
        self.len -= slot.len();
        out.extend(slot.drain(..).map(|item| (due, item)));
        if slot.capacity() > SLOT_KEEP_CAPACITY {
            slot.shrink_to(SLOT_KEEP_CAPACITY);
        }
        self.occupied[index / 64] &= !(1 << (index % 64));
    }

    /// Moves overflow items that the window now reaches into their slots.
    fn refill_from_overflow(&mut self) {
        let horizon = self.horizon();
        while let Some(entry) = self.overflow.first_entry() {
            if entry.key().0 > horizon {
                break;
            }
            let ((due, _), item) = entry.remove_entry();
            self.push_to_slot(due, item);
        }
    }

    /// How many slots after `start` (0 = `start` itself), going round, the first
    /// non-empty slot is.
    fn next_occupied(&self, start: usize) -> Option<usize> {
        let words = self.occupied.len();
        let slots = self.slots.len();
        let first_word = start / 64;
        let bit = start % 64;
        // The start word from `bit` up, then the other words, then the start word's
        // bits below `bit` (the wrap-around).
        let head = self.occupied[first_word] & (u64::MAX << bit);
        if head != 0 {
            return Some(first_word * 64 + head.trailing_zeros() as usize - start);
        }
        for step in 1..=words {
            let word_index = (first_word + step) % words;
            let mut word = self.occupied[word_index];
            if step == words {
                word &= !(u64::MAX << bit);
            }
            if word != 0 {
                let index = word_index * 64 + word.trailing_zeros() as usize;
                return Some((index + slots - start) % slots);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng, rngs::StdRng};

    use super::*;

    fn advance<T>(wheel: &mut Wheel<T>, now: i64) -> Vec<(i64, T)> {
        let mut out = Vec::new();
        wheel.advance(now, &mut out);
        out
    }

    #[test]
    fn slots_round_up_to_a_power_of_two() {
        assert_eq!(Wheel::<()>::new(0, 8192).slots(), 8192);
        assert_eq!(Wheel::<()>::new(0, 5000).slots(), 8192);
        assert_eq!(Wheel::<()>::new(0, 0).slots(), 64);
        assert_eq!(Wheel::<()>::new(0, 65).slots(), 128);
        assert_eq!(Wheel::<()>::new(0, usize::MAX).slots(), MAX_SLOTS);
        assert_eq!(DEFAULT_SLOTS, 8192);
    }

    #[test]
    fn fires_in_due_order_at_the_right_tick() {
        let mut wheel = Wheel::new(1_000, 64);
        for (due, name) in [(1_005, "c"), (1_001, "a"), (1_003, "b"), (1_040, "d")] {
            wheel.insert(due, name);
        }
        assert_eq!(wheel.len(), 4);
        assert_eq!(advance(&mut wheel, 1_000), vec![]);
        assert_eq!(advance(&mut wheel, 1_002), vec![(1_001, "a")]);
        assert_eq!(advance(&mut wheel, 1_004), vec![(1_003, "b")]);
        assert_eq!(advance(&mut wheel, 1_005), vec![(1_005, "c")]);
        assert_eq!(advance(&mut wheel, 1_039), vec![]);
        assert_eq!(advance(&mut wheel, 1_040), vec![(1_040, "d")]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.current(), 1_040);
    }

    #[test]
    fn many_items_in_one_millisecond_keep_insertion_order() {
        let mut wheel = Wheel::new(0, DEFAULT_SLOTS);
        for i in 0..10_000 {
            wheel.insert(42, i);
        }
        wheel.insert(41, -1);
        let out = advance(&mut wheel, 100);
        assert_eq!(out.len(), 10_001);
        assert_eq!(out[0], (41, -1));
        assert!(out[1..].iter().map(|(_, i)| *i).eq(0..10_000));
        assert!(out[1..].iter().all(|(due, _)| *due == 42));
        // The burst's memory is given back.
        assert!(wheel.slots[42].capacity() <= SLOT_KEEP_CAPACITY);
    }

    #[test]
    fn wraps_around_many_revolutions() {
        let mut wheel = Wheel::new(0, 64);
        let mut expected = Vec::new();
        // Keep inserting ahead while turning: every item lands in a reused slot.
        let mut out = Vec::new();
        for now in 1..=1_000 {
            for offset in [1, 7, 63, 64] {
                wheel.insert(now + offset, (now, offset));
                expected.push((now + offset, (now, offset)));
            }
            wheel.advance(now, &mut out);
            assert!(out.iter().all(|(due, _)| *due <= now));
        }
        wheel.advance(2_000, &mut out);
        expected.sort_by_key(|(due, _)| *due);
        assert_eq!(out.len(), expected.len());
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        let mut got = out.clone();
        got.sort();
        expected.sort();
        assert_eq!(got, expected);
    }

    #[test]
    fn far_future_goes_through_the_overflow() {
        let mut wheel = Wheel::new(0, 64);
        let year = 366 * 24 * 3_600_000;
        wheel.insert(65, "just past the window");
        wheel.insert(10 * 64, "ten revolutions");
        wheel.insert(year, "a year");
        wheel.insert(64, "the window's last tick");
        assert_eq!(wheel.overflow.len(), 3);
        assert_eq!(wheel.next_due(), Some(64));
        let mut out = Vec::new();
        for now in 1..=700 {
            wheel.advance(now, &mut out);
        }
        assert_eq!(
            out,
            vec![
                (64, "the window's last tick"),
                (65, "just past the window"),
                (640, "ten revolutions"),
            ]
        );
        assert_eq!(wheel.next_due(), Some(year));
        assert_eq!(advance(&mut wheel, year - 1), vec![]);
        assert_eq!(advance(&mut wheel, year), vec![(year, "a year")]);
        assert!(wheel.is_empty());
    }

    #[test]
    fn jumping_far_ahead_hands_out_everything_in_order() {
        let mut wheel = Wheel::new(0, DEFAULT_SLOTS);
        let mut rng = StdRng::seed_from_u64(1);
        let mut dues: Vec<i64> = (0..5_000).map(|_| rng.random_range(1..100_000)).collect();
        for (i, due) in dues.iter().enumerate() {
            wheel.insert(*due, i);
        }
        wheel.insert(i64::MAX / 2 + 1, usize::MAX);
        // Half of the time line in one step: must not walk it millisecond by millisecond.
        let out = advance(&mut wheel, i64::MAX / 2);
        dues.sort_unstable();
        assert_eq!(out.iter().map(|(due, _)| *due).collect::<Vec<_>>(), dues);
        assert_eq!(wheel.len(), 1);
        assert_eq!(wheel.next_due(), Some(i64::MAX / 2 + 1));
        // An item just past the jump landed in a slot, and still comes out on time.
        wheel.insert(i64::MAX / 2 + 2, usize::MAX - 1);
        assert_eq!(
            advance(&mut wheel, i64::MAX / 2 + 5),
            vec![
                (i64::MAX / 2 + 1, usize::MAX),
                (i64::MAX / 2 + 2, usize::MAX - 1)
            ]
        );
    }

    #[test]
    fn due_now_or_in_the_past_fires_at_the_next_advance() {
        let mut wheel = Wheel::new(1_000, 64);
        wheel.insert(1_000, "now");
        wheel.insert(10, "long ago");
        wheel.insert(999, "just before");
        assert_eq!(wheel.next_due(), Some(10));
        // Even if the clock did not move.
        assert_eq!(
            advance(&mut wheel, 1_000),
            vec![(10, "long ago"), (999, "just before"), (1_000, "now")]
        );
        assert_eq!(wheel.next_due(), None);
        // Overdue ones come before the wheel's own, whatever the insertion order.
        wheel.insert(1_001, "next tick");
        wheel.insert(500, "overdue");
        assert_eq!(
            advance(&mut wheel, 1_001),
            vec![(500, "overdue"), (1_001, "next tick")]
        );
    }

    #[test]
    fn a_clock_that_steps_back_is_ignored() {
        let mut wheel = Wheel::new(1_000, 64);
        wheel.insert(1_010, "a");
        assert_eq!(advance(&mut wheel, 900), vec![]);
        assert_eq!(wheel.current(), 1_000);
        assert_eq!(advance(&mut wheel, 1_010), vec![(1_010, "a")]);
    }

    #[test]
    fn remove_from_slot_overflow_and_overdue() {
        let mut wheel = Wheel::new(0, 64);
        for id in 0..3 {
            wheel.insert(10, id);
            wheel.insert(1_000, 10 + id);
        }
        wheel.insert(-5, 100);
        wheel.insert(-5, 101);
        assert_eq!(wheel.len(), 8);

        assert_eq!(wheel.remove(10, |id| *id == 1), Some(1));
        assert_eq!(wheel.remove(10, |id| *id == 1), None, "already removed");
        assert_eq!(wheel.remove(11, |id| *id == 0), None, "wrong due time");
        assert_eq!(wheel.remove(1_000, |id| *id == 12), Some(12));
        assert_eq!(wheel.remove(1_000, |id| *id == 99), None);
        assert_eq!(wheel.remove(-5, |id| *id == 100), Some(100));
        assert_eq!(wheel.next_due(), Some(-5));
        assert_eq!(wheel.remove(-5, |id| *id == 101), Some(101));
        assert_eq!(wheel.len(), 4);
        assert_eq!(wheel.next_due(), Some(10));

        // Removing the last item of a slot clears its bit.
        assert_eq!(wheel.remove(10, |_| true), Some(0));
        assert_eq!(wheel.remove(10, |_| true), Some(2));
        assert_eq!(wheel.next_due(), Some(1_000));

        let out = advance(&mut wheel, 2_000);
        assert_eq!(out, vec![(1_000, 10), (1_000, 11)]);
        assert!(wheel.is_empty());
        assert_eq!(wheel.remove(1_000, |_| true), None, "already fired");
    }

    #[test]
    fn next_due_tracks_the_earliest() {
        let mut wheel = Wheel::new(0, 64);
        assert_eq!(wheel.next_due(), None);
        wheel.insert(500, ());
        assert_eq!(wheel.next_due(), Some(500));
        wheel.insert(40, ());
        assert_eq!(wheel.next_due(), Some(40));
        wheel.insert(63, ());
        assert_eq!(wheel.next_due(), Some(40));
        advance(&mut wheel, 40);
        assert_eq!(wheel.next_due(), Some(63));
        // Slot 63 is "before" the current slot in memory: the scan wraps around.
        advance(&mut wheel, 62);
        assert_eq!(wheel.next_due(), Some(63));
        advance(&mut wheel, 63);
        assert_eq!(wheel.next_due(), Some(500));
        advance(&mut wheel, 500);
        assert_eq!(wheel.next_due(), None);
    }

    #[test]
    fn extreme_times() {
        let mut wheel = Wheel::new(i64::MAX - 100, 64);
        wheel.insert(i64::MAX, "end of time");
        wheel.insert(i64::MAX - 99, "soon");
        wheel.insert(i64::MIN, "beginning of time");
        assert_eq!(wheel.next_due(), Some(i64::MIN));
        assert_eq!(
            advance(&mut wheel, i64::MAX),
            vec![
                (i64::MIN, "beginning of time"),
                (i64::MAX - 99, "soon"),
                (i64::MAX, "end of time")
            ]
        );
        assert!(wheel.is_empty());
        assert_eq!(wheel.next_due(), None);
        wheel.insert(i64::MAX, "again");
        assert_eq!(advance(&mut wheel, i64::MAX), vec![(i64::MAX, "again")]);

        let mut negative = Wheel::new(-1_000, 64);
        negative.insert(-998, 'b');
        negative.insert(-999, 'a');
        negative.insert(-900, 'c');
        assert_eq!(advance(&mut negative, -950), vec![(-999, 'a'), (-998, 'b')]);
        assert_eq!(advance(&mut negative, 0), vec![(-900, 'c')]);
    }

    /// Random inserts, removes and clock moves (small steps, jumps, steps back) against a
    /// sorted list: same items, same order, same `len` and `next_due`.
    #[test]
    fn matches_a_simple_model() {
        for seed in 0..20 {
            let mut rng = StdRng::seed_from_u64(seed);
            let start = rng.random_range(-10_000..10_000);
            let mut wheel = Wheel::new(start, 64);
            let mut model: Vec<(i64, u64, u64)> = Vec::new(); // (due, seq, id)
            let mut now = start;
            let mut seq = 0;
            let mut out = Vec::new();
            for _ in 0..3_000 {
                match rng.random_range(0..10) {
                    0..=4 => {
                        let due = now + rng.random_range(-50..300);
                        wheel.insert(due, seq);
                        model.push((due, seq, seq));
                        seq += 1;
                    }
                    5 if !model.is_empty() => {
                        let (due, _, id) = model[rng.random_range(0..model.len())];
                        assert_eq!(wheel.remove(due, |x| *x == id), Some(id));
                        model.retain(|(_, _, x)| *x != id);
                    }
                    6 => {
                        // A missed id and a wrong due time remove nothing.
                        assert_eq!(wheel.remove(now + 5, |x| *x == u64::MAX), None);
                    }
                    _ => {
                        let step = match rng.random_range(0..20) {
                            0 => rng.random_range(64..1_000), // more than a revolution
                            1 => -rng.random_range(0..10),    // the clock stepped back
                            _ => rng.random_range(0..5),
                        };
                        let target = now + step;
                        out.clear();
                        wheel.advance(target, &mut out);
                        // Everything due up to the wheel's time comes out: on a step back,
                        // that is what was inserted already overdue.
                        now = now.max(target);
                        model.sort_by_key(|(due, seq, _)| (*due, *seq));
                        let split = model.partition_point(|(due, _, _)| *due <= now);
                        let expected: Vec<(i64, u64)> =
                            model.drain(..split).map(|(due, _, id)| (due, id)).collect();
                        assert_eq!(out, expected, "seed {seed}");
                        assert_eq!(wheel.current(), now);
                    }
                }
                assert_eq!(wheel.len(), model.len(), "seed {seed}");
                let model_min = model.iter().map(|(due, _, _)| *due).min();
                assert_eq!(wheel.next_due(), model_min, "seed {seed}");
            }
        }
    }
}
