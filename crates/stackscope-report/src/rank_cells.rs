//! The rank table's cells as text, one definition for both tables that show them: `ranks.txt`
//! (and `merge`'s terminal) and the merged page's table.

use stackscope_aggregate::RankRow;

/// One row of the rank table, before either table lays it out (or escapes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RankCells {
    /// Its share of samples taken while its GPU idled, `-` without GPU data.
    pub gpu_idle: String,
    /// Its top function with its share, `-` without one.
    pub top: String,
}

impl RankCells {
    pub(crate) fn of(row: &RankRow) -> RankCells {
        RankCells {
            gpu_idle: row
                .gpu_idle_share
                .map_or_else(|| "-".to_owned(), |s| format!("{:.0}%", s * 100.0)),
            top: match (&row.top_function, row.top_function_share) {
                (Some(f), Some(share)) => format!("{f} {:.0}%", share * 100.0),
                _ => "-".to_owned(),
            },
        }
    }
}
