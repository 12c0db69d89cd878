//! Decoding the interpreter's objects from copied bytes: code objects and their line tables
//! ([`code`], [`linetable`]), `str` ([`pystr`]), values shown as locals ([`values`]), file names
//! ([`filenames`]) and thread names ([`names`]).

pub(super) mod code;
pub(super) mod filenames;
pub(super) mod linetable;
pub(super) mod names;
pub(super) mod pystr;
pub(super) mod values;
