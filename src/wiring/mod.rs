//! Each mode assembled from settings, edges and its loop: [`controller`] (the node agent's
//! wiring is in `main.rs`).

pub mod controller;
