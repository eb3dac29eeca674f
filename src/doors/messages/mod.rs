//! The Anthropic Messages door (being built).
// STUB
pub fn to_chat(_: &[u8]) -> Result<Vec<u8>, crate::api::GatewayError> {
    unimplemented!()
}
pub fn bridged(f: crate::catalog::Family) -> &'static dyn crate::providers::Adapter {
    crate::providers::adapter_for(f)
}
