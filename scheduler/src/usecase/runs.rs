//! Runs: listing them as the caller may see them.

use super::Result;
use super::jobs::job_filter;
use crate::access::Principal;
use crate::model::{Page, Run, RunFilter};
use crate::node::Node;

/// The runs of `filter` that `who` may see, newest first. `job` is a job's id or name (an
/// id is used as it is, so the runs of a deleted job stay listable); the filter's own
/// `job_id` and `apps` are set here.
pub async fn list(
    node: &Node,
    who: &Principal,
    job: Option<&str>,
    filter: RunFilter,
) -> Result<Page<Run>> {
    let filter = RunFilter {
        job_id: job_filter(node.store(), job).await?,
        apps: who.app_filter().map(<[String]>::to_vec),
        ..filter
    };
    Ok(node.store().list_runs(&filter).await?)
}
