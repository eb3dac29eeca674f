//! The I/O that requests need outside Pingora's proxy path: upstream credentials (static keys
//! and the Vertex OAuth token refresher), the client that sends an adapter's fan-out calls, and
//! the explicit context caches created upstream. Providers describe *what* to send (pure); this
//! room sends it.
pub mod context_cache;
pub mod credentials;
pub mod fan_out;
