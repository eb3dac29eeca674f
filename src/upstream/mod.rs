//! The I/O that requests need: upstream credentials (static keys and the Vertex OAuth token
//! refresher), the client that sends every planned call, and the explicit context caches
//! created upstream. Providers describe *what* to send (pure); this
//! room sends it.
pub mod client;
pub mod context_cache;
pub mod credentials;
pub mod failure;
pub mod multiplex;
pub mod roots;
