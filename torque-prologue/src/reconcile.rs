//! `cder-torque-reconcile`: frees the devices of TORQUE jobs pbs_mom no
//! longer holds, the safety net behind an epilogue whose release failed.
//!
//! The steps are kept apart because their order is the point: the ledger's
//! generation is read first, then pbs_mom's job files are listed, then
//! cderd is asked to release every TORQUE allocation that is not in the
//! list **and** not newer than that generation. A prologue that allocates
//! between the listing and the reconcile (its job file appeared after the
//! listing) is newer than the generation, so its job keeps its devices.

use std::io;

use cder_model::{JobKey, Lrms};
use cder_protocol::{Client, ClientError, ReconcileRequest, Reconciled};

use crate::mom::{live_jobs, PbsHome};

/// Step 1: the ledger's allocation sequence number now.
pub fn generation(client: &mut Client) -> Result<u64, ClientError> {
    Ok(client.status()?.generation)
}

/// Step 2: the jobs pbs_mom holds (every job file, whatever its state:
/// [`live_jobs`]). A job id that is not a valid key is an error: the list
/// must be complete, or nothing is released.
pub fn snapshot(home: &PbsHome) -> io::Result<Vec<JobKey>> {
    live_jobs(home)?
        .into_iter()
        .map(|id| {
            JobKey::new(Lrms::Torque, &id).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("{}: job {id:?}: {e}", home.jobs_dir().display()))
            })
        })
        .collect()
}

/// Step 3: release TORQUE allocations not in `live` and not newer than `as_of`.
pub fn release_stale(client: &mut Client, live: Vec<JobKey>, as_of: u64) -> Result<Reconciled, ClientError> {
    client.reconcile(&ReconcileRequest { live_jobs: live, lrms: Some("torque".into()), as_of: Some(as_of) })
}
