//! The Responses request → the chat body.

use crate::api::GatewayError;
use crate::catalog::Family;

/// A Responses request read onto the request model.
#[derive(Debug)]
pub struct Parsed {
    /// The chat body the route's adapter plans from.
    pub chat: Vec<u8>,
    /// The conversation before the answer as Responses input items (a JSON array): the prior
    /// items, then this request's `input`. Empty when the answer will not be stored.
    pub items: Vec<u8>,
    /// The client lets the gateway keep the answer (`store`, default true).
    pub store: bool,
}

/// Reads a Responses `body` onto the chat body. `prior` is the stored conversation a
/// `previous_response_id` continues (a JSON array of items: its input, then its output);
/// `family` is the route family's, which decides where cache breakpoints go.
pub fn parse(body: &[u8], prior: Option<&[u8]>, family: Family) -> Result<Parsed, GatewayError> {
    let _ = (body, prior, family);
    Err(GatewayError::invalid("the Responses door is not built yet"))
}
