//! Sets of ranks in words: `0-5, 7, 9-11` for the ranks that share a place, and the ranks a
//! job should have by its `WORLD_SIZE` that no process at hand has ("rank 1 of 3 is missing").
//! `dump`, the hang report and `merge` all write ranks this way.

use std::collections::BTreeSet;

use serde::Serialize;
use stackscope_event::RankInfo;

/// Ranks the job should have by its `WORLD_SIZE` that no process at hand has: `dump`'s and
/// `merge`'s "rank 1 of 3 is missing".
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingRanks {
    pub world_size: u32,
    pub missing: Vec<u32>,
}

impl MissingRanks {
    /// Of the ranks of `ranks` (each process's), those missing from `0..WORLD_SIZE`, where the
    /// processes say a world size (the largest said) and `min_present` ranks at least are
    /// there.
    pub fn of<'a>(
        ranks: impl IntoIterator<Item = &'a RankInfo>,
        min_present: usize,
    ) -> Option<MissingRanks> {
        let mut present = BTreeSet::new();
        let mut world_size = None;
        for info in ranks {
            if let Some(rank) = info.rank {
                present.insert(rank);
                world_size = world_size.max(info.world_size);
            }
        }
        let world_size = world_size?;
        let missing: Vec<u32> = (0..world_size).filter(|r| !present.contains(r)).collect();
        (present.len() >= min_present && !missing.is_empty()).then_some(MissingRanks {
            world_size,
            missing,
        })
    }

    /// "rank 1 of 3 is missing", "ranks 1, 4-7 of 8 are missing".
    pub fn sentence(&self) -> String {
        match self.missing.as_slice() {
            [one] => format!("rank {one} of {} is missing", self.world_size),
            many => format!(
                "ranks {} of {} are missing",
                rank_ranges(many),
                self.world_size
            ),
        }
    }
}

/// `0-5, 7, 9-11` from sorted, distinct ranks.
pub fn rank_ranges(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let start = ranks[i];
        let mut end = start;
        while i + 1 < ranks.len() && ranks[i + 1] == end + 1 {
            i += 1;
            end = ranks[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_compact() {
        assert_eq!(rank_ranges(&[0, 1, 2, 3, 4, 5, 7]), "0-5, 7");
        assert_eq!(rank_ranges(&[3]), "3");
        assert_eq!(rank_ranges(&[]), "");
        assert_eq!(rank_ranges(&[0, 2, 4, 5]), "0, 2, 4-5");
    }

    #[test]
    fn ranks_missing_from_the_world_size() {
        let info = |rank, world| RankInfo {
            rank: Some(rank),
            world_size: Some(world),
            ..RankInfo::default()
        };
        let two_of_three = [info(0, 3), info(2, 3), RankInfo::default()];
        let missing = MissingRanks::of(&two_of_three, 2).expect("rank 1");
        assert_eq!(missing.missing, [1]);
        assert_eq!(missing.sentence(), "rank 1 of 3 is missing");
        assert_eq!(MissingRanks::of(&two_of_three, 3), None, "too few to say");
        let all = [info(0, 2), info(1, 2)];
        assert_eq!(MissingRanks::of(&all, 1), None);
        let few = [info(0, 8), info(2, 8), info(3, 8)];
        assert_eq!(
            MissingRanks::of(&few, 1).expect("missing").sentence(),
            "ranks 1, 4-7 of 8 are missing"
        );
        assert_eq!(MissingRanks::of(&[RankInfo::default()], 0), None);
    }
}
