//! Merging a run's record into the map: an original once recorded is never replaced.

use crate::digest_map::schema::ImageRecord;
use crate::patch::outcome::Outcome;

/// Merges a new record into the list, never replacing an original an earlier record holds.
///
/// The last record for the same target decides: when the new record starts from the same
/// original, it replaces it (the same work, further along); when it starts from the digest the
/// earlier record patched to (a re-run after a failure or a kill, or a re-run that finds the
/// image already patched), the earlier originals stay and only the progress is taken over; when
/// it starts from anything else (someone moved the tag in between), both are kept.
pub fn merge(images: &mut Vec<ImageRecord>, new: ImageRecord) {
    let Some(i) = images.iter().rposition(|r| r.target == new.target) else {
        images.push(new);
        return;
    };
    let old = &mut images[i];
    let continues = old.patched_digest.is_some()
        && (old.patched_digest.as_deref() == Some(new.original_digest.as_str())
            || (new.outcome == Outcome::AlreadyPatched
                && new.patched_digest == old.patched_digest));
    if continues {
        // Progress on the same lineage: every original already recorded stays.
        old.in_progress = new.in_progress;
        for c in new.companions {
            match old.companions.iter_mut().find(|o| o.target == c.target) {
                Some(o) if c.patched_digest == o.patched_digest => o.moved |= c.moved,
                Some(o) if o.patched_digest.is_none() && c.patched_digest.is_some() => {
                    o.patched_digest = c.patched_digest;
                    o.moved = c.moved;
                }
                Some(_) => {}
                None => old.companions.push(c),
            }
        }
    } else if new.original_digest == old.original_digest {
        *old = new;
    } else {
        images.push(new);
    }
}
