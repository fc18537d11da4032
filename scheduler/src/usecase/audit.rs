//! The audit log: who changed what, read by admins only, a page at a time.

use super::Result;
use crate::access::Principal;
use crate::model::Page;
use crate::ports::Ports;
use crate::store::AuditEntry;

/// A page of the audit log, newest first, before the entry `before_id` if given; for an
/// admin only.
pub async fn list(
    ports: &Ports,
    who: &Principal,
    before_id: Option<i64>,
    limit: u32,
) -> Result<Page<AuditEntry>> {
    who.check_admin("reading the audit log")?;
    let mut items = ports.store().list_audit(before_id, limit).await?;
    let next = (items.len() > limit as usize)
        .then(|| {
            items.truncate(limit as usize);
            items.last().map(|e| e.id)
        })
        .flatten();
    Ok(Page { items, next })
}
