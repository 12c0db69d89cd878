//! Proving a thread did not move without reading its frames: the GIL's word ([`gil`],
//! [`quiet`]), the holder read without a stop ([`holder`]), a still thread's proof ([`still`]),
//! context switches ([`switches`]), what follows a lost bet ([`lost_bet`]), and a copy that
//! may be torn kept on a stack a sound read gave before ([`vouch`]).

pub(super) mod gil;
pub(super) mod holder;
pub(super) mod lost_bet;
pub(super) mod quiet;
pub(super) mod still;
pub(super) mod switches;
pub(super) mod vouch;
