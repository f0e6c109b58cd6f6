//! Calls that leave for other programs over HTTP: the `http` reload action's client
//! ([`reload_client`]) and notifications to chat and webhooks ([`notify`]), sharing one
//! client builder ([`http_client`]).

pub mod http_client;
pub mod notify;
pub mod reload_client;
