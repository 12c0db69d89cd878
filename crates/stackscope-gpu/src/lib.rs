//! stackscope-gpu
