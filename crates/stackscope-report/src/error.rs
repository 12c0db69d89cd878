//! The one error type of the report writers.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {}: {source}", path.display())]
    File { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("cannot encode the summary as JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Rebuild(#[from] stackscope_samplelog::RebuildError),
    #[error("cannot draw the GPU timeline chart: {0}")]
    Chart(String),
}
