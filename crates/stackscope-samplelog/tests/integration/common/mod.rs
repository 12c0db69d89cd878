//! What the sample log's tests share: the synthetic recording of the workspace's testkit.

pub use stackscope_testkit::events::same;
pub use stackscope_testkit::synthetic::*;
