//! stackscope-sampler
