//! The headline verdict of recordings merged by `stackscope merge`: the rank that differs most
//! and its own recording's verdict; else, for a few recordings, each one's verdict.
//!
//! Pure, over what `merge` read ([`MergedRecordings`], each [`RecordingInput`]) and each
//! recording's verdict; the HTML writer only shows it.

use serde::Serialize;

use super::class::{Verdict, VerdictClass};
use crate::jobs::{MergedRecordings, RecordingInput};

/// Recordings whose verdicts the headline spells out in full; past this it points at the list.
pub const VERDICTS_IN_HEADLINE: usize = 4;

/// One recording's verdict, by whose recording it is.
#[derive(Debug, Serialize)]
pub struct RecordingVerdict {
    /// `rank 3 on node-b`, or the host of a recording of many ranks.
    pub who: String,
    pub class: VerdictClass,
    pub text: String,
}

/// The headline's verdict: the rank that differs most and its recording's verdict; else, for a
/// few recordings, each one's verdict. `recordings` are the merged recordings with each one's
/// own verdict; `verdicts` those of them that have one to say (not
/// [`VerdictClass::Unknown`]).
pub fn headline_verdict(
    merged: &MergedRecordings,
    recordings: &[(&RecordingInput, Option<&Verdict>)],
    verdicts: &[RecordingVerdict],
) -> Option<Verdict> {
    if let Some(odd) = &merged.most_different {
        let own = recordings
            .iter()
            .find(|(input, _)| input.holds(&odd.place))
            .and_then(|(_, verdict)| *verdict)
            .filter(|v| v.class != VerdictClass::Unknown);
        let mut text = format!(
            "{} differs most from its peers ({:.0}% of its profile differs from theirs, the next \
             {:.0}%).",
            odd.place.describe(),
            odd.distance * 100.0,
            odd.next_distance * 100.0
        );
        if let Some(f) = &odd.top_function {
            text.push_str(&format!(" Its top function: {f}."));
        }
        if let Some(v) = own {
            text.push_str(&format!(" Its recording's verdict: {}", v.text));
        }
        return Some(Verdict {
            class: own.map_or(VerdictClass::Unknown, |v| v.class),
            text,
        });
    }
    if verdicts.is_empty() {
        return None;
    }
    let text = if verdicts.len() <= VERDICTS_IN_HEADLINE {
        verdicts
            .iter()
            .map(|v| format!("{}: {}", v.who, v.text))
            .collect::<Vec<_>>()
            .join(" ")
    } else {
        format!(
            "{} recordings have a verdict each; they are listed under the rank table.",
            verdicts.len()
        )
    };
    let class = verdicts[0].class;
    Some(Verdict {
        class: if verdicts.iter().all(|v| v.class == class) {
            class
        } else {
            VerdictClass::Unknown
        },
        text,
    })
}
