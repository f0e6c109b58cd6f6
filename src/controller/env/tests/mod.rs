//! The env consumers feature in the real controller loop, with fakes of every edge and a
//! paused clock: `harness` drives it; `fix` finds again the evictions pacing refused or held,
//! `flap` counts the flap breaker per owner.

mod fix;
mod flap;
mod harness;
mod recorded;
mod restart;
