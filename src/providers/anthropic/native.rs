//! STUB (replaced by the native adapter's branch).
use super::super::*;
pub struct AnthropicNative;
impl Adapter for AnthropicNative {
    fn plan(
        &self,
        _: &RawRequest<'_>,
        _: &Target<'_>,
        _: &Credentials,
    ) -> Result<Plan, GatewayError> {
        unimplemented!()
    }
    fn translate_buffered(&self, _: &[u8], _: &ResponseCx) -> Result<Translated, TranslateError> {
        unimplemented!()
    }
    fn stream_translator(&self, _: ResponseCx) -> Box<dyn StreamTranslator> {
        unimplemented!()
    }
    fn upstream_error_message(&self, _: u16, _: &[u8]) -> String {
        unimplemented!()
    }
}
