//! Recent fire lateness (ring fire time − due time), for the dashboard: a histogram per
//! minute for the last hour, in this node's memory. Prometheus has the full histogram
//! (`rota_fire_lateness_seconds`); this answers "what was p99 over the last few minutes"
//! without one.

use std::collections::VecDeque;
use std::sync::Mutex;

use crate::model::Millis;

/// Upper bounds of the histogram's bins, ms; the last bin holds everything later.
const EDGES_MS: [i64; 24] = [
    0, 1, 2, 3, 4, 5, 7, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750, 1_000, 2_000, 5_000,
    10_000, 60_000,
];
const BINS: usize = EDGES_MS.len() + 1;
const MINUTES_KEPT: usize = 60;

#[derive(Default)]
pub struct RecentLateness {
    minutes: Mutex<VecDeque<(Millis, [u64; BINS])>>,
}

/// A percentile as the histogram knows it: at most `le_ms` late (`None`: beyond the last
/// edge), over `fires` fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Percentile {
    pub le_ms: Option<i64>,
    pub fires: u64,
}

impl RecentLateness {
    /// Records the lateness (ms) of fires at `now`.
    pub fn record(&self, now: Millis, late_ms: impl IntoIterator<Item = i64>) {
        let minute = now.div_euclid(60_000);
        let mut minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
        if minutes.back().is_none_or(|(m, _)| *m != minute) {
            minutes.push_back((minute, [0; BINS]));
            while minutes.len() > MINUTES_KEPT {
                minutes.pop_front();
            }
        }
        let Some((_, bins)) = minutes.back_mut() else {
            return;
        };
        for late in late_ms {
            let bin = EDGES_MS.partition_point(|&edge| edge < late);
            bins[bin] += 1;
        }
    }

    /// The `q` quantile (0–1) of the fires in the last `window_ms` before `now`; `None`
    /// when there were none.
    pub fn quantile(&self, now: Millis, window_ms: Millis, q: f64) -> Option<Percentile> {
        let from = (now - window_ms).div_euclid(60_000);
        let mut total = [0u64; BINS];
        {
            let minutes = self.minutes.lock().unwrap_or_else(|e| e.into_inner());
            for (_, bins) in minutes.iter().filter(|(m, _)| *m >= from) {
                for (t, b) in total.iter_mut().zip(bins) {
                    *t += b;
                }
            }
        }
        let fires: u64 = total.iter().sum();
        if fires == 0 {
            return None;
        }
        let rank = ((fires as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in total.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Percentile {
                    le_ms: EDGES_MS.get(i).copied(),
                    fires,
                });
            }
        }
        Some(Percentile { le_ms: None, fires })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_come_from_the_window_only() {
        let l = RecentLateness::default();
        let t0 = 1_800_000_000_000;
        // An old, slow minute, then 990 fires at ≤ 2 ms and 10 at 40 ms.
        l.record(t0, [5_000; 100]);
        let now = t0 + 10 * 60_000;
        l.record(now, std::iter::repeat_n(2, 990).chain([40; 10]));
        let p99 = l.quantile(now, 5 * 60_000, 0.99).unwrap();
        assert_eq!(
            p99,
            Percentile {
                le_ms: Some(2),
                fires: 1000
            }
        );
        let p999 = l.quantile(now, 5 * 60_000, 0.999).unwrap();
        assert_eq!(p999.le_ms, Some(50));
        // Over the whole hour the slow minute counts.
        assert_eq!(l.quantile(now, 3_600_000, 0.99).unwrap().le_ms, Some(5_000));
        assert_eq!(l.quantile(now + 3_600_000, 60_000, 0.99), None);
        l.record(now, [120_000]);
        assert_eq!(l.quantile(now, 60_000, 1.0).unwrap().le_ms, None);
    }
}
