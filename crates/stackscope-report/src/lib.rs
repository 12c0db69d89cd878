//! stackscope-report
