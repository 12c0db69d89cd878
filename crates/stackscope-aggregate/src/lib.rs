//! stackscope-aggregate
