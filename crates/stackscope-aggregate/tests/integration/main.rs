//! The aggregator as the binary drives it, one test binary: bounded memory over endless
//! threads, stacks and readings, and `top`'s table agreeing with `summary.json` on one stream.

mod bounded;
mod churn;
mod top_agrees;
