//! Backfill (SPEC §11): a recurring job's fire times in a range — a period it missed while
//! disabled, or before it existed — created as its fires, at most once per fire time however
//! often it is asked (each carries the key the scan's own fire of that time would have).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::jobs::find_job;
use super::tasks::parse_rfc3339;
use super::validate::{self, invalid};
use super::{Error, Result};
use crate::access::{Need, Principal};
use crate::model::{Job, Millis};
use crate::ports::Ports;
use crate::schedule::Schedule;

/// Fire times one backfill creates at most, unless it says otherwise.
pub const DEFAULT_MAX: i64 = 1_000;
/// And at most, whatever it says.
pub const MAX: i64 = 10_000;

/// `POST /api/v1/jobs/{id}/backfill`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRange {
    /// The first fire time considered, inclusive (RFC 3339).
    #[schema(format = DateTime)]
    pub from: String,
    /// The end of the range, exclusive (RFC 3339).
    #[schema(format = DateTime)]
    pub to: String,
    /// The most fire times the range may hold (1 to 10,000; 1,000 by default): a range
    /// holding more is refused, not cut.
    pub max: Option<i64>,
}

/// What a backfill did.
#[derive(Debug, Serialize, ToSchema, PartialEq)]
pub struct Backfilled {
    /// Fire times of the job's schedule in the range.
    pub fire_times: usize,
    /// Tasks created for them; the others existed already (an earlier backfill, or the
    /// scan's own fire of that time).
    pub created: u64,
}

/// Creates the fires of `job` in the range `r`, as `who` (who must be allowed to change
/// the job).
pub async fn backfill(
    ports: &Ports,
    who: &Principal,
    job: &str,
    r: &BackfillRange,
) -> Result<Backfilled> {
    let named = job;
    let job = find_job(ports.store(), named).await?;
    who.check(&job.spec.app, Need::Change, &format!("job `{named}`"))?;
    let time = |field: &str, text: &str| {
        parse_rfc3339(text).ok_or_else(|| {
            invalid(
                field,
                format!(
                    "`{}` is not an RFC 3339 time like 2026-11-30T09:15:00Z",
                    validate::excerpt(text)
                ),
            )
        })
    };
    let from = time("from", &r.from)?;
    let to = time("to", &r.to)?;
    if to <= from {
        return Err(invalid("to", "must be after `from`"));
    }
    let max = validate::within("max", r.max.unwrap_or(DEFAULT_MAX), 1..=MAX)?;
    let times = fire_times(&job, from, to, max as usize)?;
    let created = ports
        .store()
        .backfill_fires(job.id, job.generation, &times, ports.clock().now_ms())
        .await?;
    tracing::info!(
        job.id = job.id,
        fire_times = times.len(),
        created,
        "job backfilled"
    );
    ports
        .audit(
            &who.name,
            "backfill job",
            &format!("{} from {} to {}", job.spec.name, r.from, r.to),
        )
        .await;
    Ok(Backfilled {
        fire_times: times.len(),
        created,
    })
}

/// The fire times of `job`'s schedule in `[from, to)`; more than `max` is an error naming
/// the range. A fixed rate keeps the job's phase (its next fire time's, else its creation's).
fn fire_times(job: &Job, from: Millis, to: Millis, max: usize) -> Result<Vec<Millis>> {
    let schedule = &job.spec.schedule;
    if *schedule == Schedule::None {
        return Err(invalid(
            "schedule",
            format!(
                "job `{}` has no schedule: it has no fire times to backfill",
                job.spec.name
            ),
        ));
    }
    let compiled = schedule
        .compile_at(from)
        .map_err(|e| Error::Unprocessable(format!("schedule: {e}")))?;
    let mut cursor = match schedule {
        Schedule::FixedRate { every_ms } => {
            let anchor = job.next_fire_at.unwrap_or(job.created_at);
            // The last fire time before `from` on the job's phase.
            anchor + (from - anchor).div_euclid(*every_ms) * every_ms - every_ms
        }
        _ => from - 1,
    };
    let mut out = Vec::new();
    while let Some(t) = compiled.next_after(cursor).filter(|t| *t < to) {
        if t >= from {
            if out.len() == max {
                return Err(invalid(
                    "to",
                    format!(
                        "the range holds more than {max} fire times; narrow it or raise `max` \
                         (at most {MAX})"
                    ),
                ));
            }
            out.push(t);
        }
        cursor = t;
    }
    Ok(out)
}
