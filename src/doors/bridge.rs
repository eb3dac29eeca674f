//! [`Bridged`]: a family's chat adapter behind a front door whose dialect its upstream does not
//! speak. The door has already turned the client's body into the chat body (the request model),
//! so planning, counting and upstream errors are the inner adapter's; its answers are rendered
//! back into the door's shapes.

use crate::api::{Door, GatewayError, RawRequest};
use crate::catalog::Family;
use crate::doors::{messages, responses};
use crate::providers::{
    anthropic, gemini, openai_compat, Adapter, ChatAdapter, Credentials, Plan, ResponseCx,
    StreamTranslator, Target, TranslateError, Translated, UpstreamRequest,
};

/// The chat adapter `inner`, answering in `door`'s shapes.
pub struct Bridged {
    pub inner: &'static dyn ChatAdapter,
    pub door: Door,
}

impl Adapter for Bridged {
    fn plan(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<Plan, GatewayError> {
        self.inner.plan(req, target, creds)
    }

    fn translate_buffered(
        &self,
        body: &[u8],
        cx: &ResponseCx,
    ) -> Result<Translated, TranslateError> {
        match self.door {
            Door::OpenAi => self.inner.translate_buffered(body, cx),
            Door::Messages => self.inner.translate_answer(body, cx, &messages::AsMessage),
            Door::Responses => self
                .inner
                .translate_answer(body, cx, &responses::AsResponse),
        }
    }

    fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
        match self.door {
            Door::OpenAi => self.inner.stream_translator(cx),
            Door::Messages => Box::new(messages::stream(self.inner.chat_stream(cx.clone()), cx)),
            Door::Responses => Box::new(responses::stream(self.inner.chat_stream(cx.clone()), cx)),
        }
    }

    fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
        self.inner.upstream_error_message(status, body)
    }

    fn count_tokens(
        &self,
        req: &RawRequest<'_>,
        target: &Target<'_>,
        creds: &Credentials,
    ) -> Result<UpstreamRequest, GatewayError> {
        self.inner.count_tokens(req, target, creds)
    }

    fn read_count(&self, body: &[u8]) -> Result<u64, TranslateError> {
        self.inner.read_count(body)
    }
}

macro_rules! bridges {
    ($door:ident) => {
        [
            Bridged {
                inner: &gemini::Gemini,
                door: Door::$door,
            },
            Bridged {
                inner: &openai_compat::OpenAiCompat,
                door: Door::$door,
            },
            Bridged {
                inner: &anthropic::Anthropic,
                door: Door::$door,
            },
        ]
    };
}

static MESSAGES: [Bridged; 3] = bridges!(Messages);
static RESPONSES: [Bridged; 3] = bridges!(Responses);

/// `door`'s adapter for a route of `family` whose upstream does not speak the door's dialect
/// (on the OpenAI door: the family's own adapter).
///
/// On the Messages door `Family::Anthropic` is a fallback only: Claude routes go through the
/// native pass-through adapter, which keeps what the chat model cannot carry.
pub fn bridged(door: Door, family: Family) -> &'static dyn Adapter {
    let at = match family {
        Family::Gemini => 0,
        Family::OpenAiCompat => 1,
        Family::Anthropic => 2,
    };
    match door {
        Door::OpenAi => crate::providers::adapter_for(family),
        Door::Messages => &MESSAGES[at],
        Door::Responses => &RESPONSES[at],
    }
}

#[cfg(test)]
mod tests {
    use super::super::messages::test_support::{
        creds, cx, events, fixture, gemini_model, gemini_route, stream_fixture, target,
    };
    use super::super::messages::to_chat;
    use super::*;
    use crate::api::Operation;
    use crate::providers::test_support::single;
    use bytes::{Bytes, BytesMut};
    use serde_json::{json, Value};

    /// The Gemini body planned for an Anthropic request, through the door.
    fn gemini_body(req: &Value, stream: bool) -> (String, Value) {
        let chat = to_chat(&serde_json::to_vec(req).unwrap()).unwrap();
        let raw = RawRequest::parse(&chat, Operation::Chat).unwrap();
        let (m, r) = (gemini_model(), gemini_route());
        let up = single(
            bridged(Door::Messages, Family::Gemini)
                .plan(&raw, &target(&m, &r, stream), &creds())
                .unwrap(),
        );
        (up.path, serde_json::from_slice(&up.body).unwrap())
    }

    #[test]
    fn a_claude_code_turn_reaches_gemini_with_its_signatures_and_tools() {
        // The id Gemini's adapter minted for a call, carrying the thought signature.
        let id = "call_msggw7_0.CiIB-_9a8w";
        let req = json!({
            "model": "google/gemini-test",
            "max_tokens": 8000,
            "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "List the files."},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Use ls.", "signature": "sig"},
                    {"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": "a.rs\nb.rs"}]},
                    {"type": "text", "text": "Now summarise."}
                ]}
            ],
            "tools": [
                {"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
                {"type": "web_search_20250305", "name": "web_search"}
            ],
            "tool_choice": {"type": "any"},
            "thinking": {"type": "enabled", "budget_tokens": 4096},
            "metadata": {"user_id": "u"}
        });
        let (path, body) = gemini_body(&req, true);
        assert_eq!(
            path,
            "/base/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            body["systemInstruction"]["parts"],
            json!([{"text": "You are a coding agent."}])
        );
        let contents = body["contents"].as_array().unwrap();
        let roles: Vec<&Value> = contents.iter().map(|c| &c["role"]).collect();
        assert_eq!(roles, [&json!("user"), &json!("model"), &json!("user")]);
        assert_eq!(
            contents[1]["parts"],
            json!([{"functionCall": {"name": "Bash", "args": {"command": "ls"}}, "thoughtSignature": "CiIB+/9a8w=="}]),
            "the thinking block is dropped, the signature comes back from the id"
        );
        let answer = &contents[2]["parts"];
        assert_eq!(answer[0]["functionResponse"]["name"], "Bash");
        assert_eq!(answer[1], json!({"text": "Now summarise."}));
        let decls = &body["tools"][0]["functionDeclarations"];
        assert_eq!(decls.as_array().unwrap().len(), 1, "web_search dropped");
        assert_eq!(decls[0]["name"], "Bash");
        assert_eq!(body["toolConfig"]["functionCallingConfig"]["mode"], "ANY");
        assert_eq!(body["generationConfig"]["maxOutputTokens"], 8000);
        assert_eq!(
            body["generationConfig"]["thinkingConfig"]["thinkingBudget"],
            4096
        );
    }

    #[test]
    fn buffered_and_streamed_answers_are_anthropics() {
        let body = fixture("gemini-generate-thinking-2.5-flash-devapi.json");
        let t = bridged(Door::Messages, Family::Gemini)
            .translate_buffered(&body, &cx())
            .unwrap();
        let inner = crate::providers::gemini::Gemini
            .translate_buffered(&body, &cx())
            .unwrap();
        assert_eq!(
            t.usage, inner.usage,
            "billed what the inner adapter counted"
        );
        assert_eq!(
            t.body,
            messages::to_message(&inner.body, &inner.usage, &cx()).unwrap()
        );

        let input = stream_fixture("gemini-stream-2.0-flash-devapi.sse", false, "\r\n\r\n");
        let mut s = bridged(Door::Messages, Family::Gemini).stream_translator(cx());
        let mut out = BytesMut::new();
        s.feed(&input, &mut out);
        s.finish(&mut out);
        let ev = events(&out);
        assert_eq!(ev[0].0, "message_start");
        assert_eq!(ev[ev.len() - 1].0, "message_stop");
        assert_eq!(s.usage().input, 13);

        let body = fixture("openai-chat-completion.json");
        let t = bridged(Door::Messages, Family::OpenAiCompat)
            .translate_buffered(&body, &cx())
            .unwrap();
        let m: Value = serde_json::from_slice(&t.body).unwrap();
        assert_eq!(m["type"], "message");
        assert_eq!(t.usage.output, 363);

        let body = fixture("anthropic-message-text.json");
        let t = bridged(Door::Messages, Family::Anthropic)
            .translate_buffered(&body, &cx())
            .unwrap();
        let m: Value = serde_json::from_slice(&t.body).unwrap();
        let orig: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(m["content"], orig["content"]);
        assert_eq!(m["id"], "msg_gw7");
    }

    #[test]
    fn buffered_and_streamed_answers_are_responses() {
        use super::super::responses::test_support::{chat_answer, cx as resp_cx, events};
        let body = fixture("gemini-function-call-thought-signature-2.5-pro-devapi.json");
        let t = bridged(Door::Responses, Family::Gemini)
            .translate_buffered(&body, &resp_cx())
            .unwrap();
        let inner = crate::providers::gemini::Gemini
            .translate_buffered(&body, &resp_cx())
            .unwrap();
        assert_eq!(
            t.usage, inner.usage,
            "billed what the inner adapter counted"
        );
        assert_eq!(
            t.body,
            responses::to_response(&inner.body, &inner.usage, &resp_cx()).unwrap()
        );
        let r: Value = serde_json::from_slice(&t.body).unwrap();
        assert_eq!(
            (&r["object"], &r["id"]),
            (&json!("response"), &json!("resp_gw7"))
        );

        for (family, input) in [
            (
                Family::Gemini,
                stream_fixture("gemini-stream-2.0-flash-devapi.sse", false, "\r\n\r\n"),
            ),
            (
                Family::Anthropic,
                stream_fixture("anthropic-stream-thinking.chunks.jsonl", true, "\n\n"),
            ),
            (
                Family::OpenAiCompat,
                fixture("openai-chat-stream-tool-call-usage.sse"),
            ),
        ] {
            let mut s = bridged(Door::Responses, family).stream_translator(resp_cx());
            let mut out = BytesMut::new();
            s.feed(&input, &mut out);
            s.finish(&mut out);
            let ev = events(&out);
            assert_eq!(ev[0].0, "response.created", "{family:?}");
            assert_eq!(ev[ev.len() - 1].0, "response.completed", "{family:?}");
            let (completion, usage) = chat_answer(crate::providers::adapter_for(family), &input);
            assert_eq!(s.usage(), usage, "{family:?}");
            assert_eq!(
                s.final_answer().unwrap().body,
                responses::to_response(&completion, &usage, &resp_cx()).unwrap(),
                "{family:?}: the stored answer is the buffered one"
            );
        }

        // The other doors keep nothing and leave aborts to the stateless frame.
        let mut s = bridged(Door::Messages, Family::Gemini).stream_translator(cx());
        let mut out = BytesMut::new();
        s.finish(&mut out);
        assert_eq!((s.final_answer(), s.abort_frame("x")), (None, None));
    }

    #[test]
    fn a_rendered_answer_says_where_its_usage_closes() {
        use crate::doors::charge::{into_body, Charge};
        let charge = Charge {
            cost: crate::money::Usd::from_pico(7),
            id: "gen-7".into(),
        };
        let answers = [
            (
                Family::Gemini,
                "gemini-generate-thinking-2.5-flash-devapi.json",
            ),
            (Family::Anthropic, "anthropic-message-text.json"),
            (Family::OpenAiCompat, "openai-chat-completion.json"),
        ];
        for (family, name) in answers {
            for door in [Door::OpenAi, Door::Messages, Door::Responses] {
                let t = bridged(door, family)
                    .translate_buffered(&fixture(name), &cx())
                    .unwrap();
                let passed = family == Family::OpenAiCompat && door == Door::OpenAi;
                assert_eq!(t.usage_close.is_none(), passed, "{door:?} {name}");
                assert_eq!(
                    into_body(&t.body, t.usage_close, &charge),
                    into_body(&t.body, None, &charge),
                    "{door:?} {name}"
                );
            }
        }
    }

    /// Every buffered answer a family makes, rendered by each door from the typed completion,
    /// is what the door would render from the completion's JSON: one answer whichever way it
    /// reaches the door, exclusions and all.
    #[test]
    fn typed_answers_render_as_their_json_would() {
        let answers = [
            (
                Family::Gemini,
                "gemini-function-call-gemini3-pro-devapi.json",
            ),
            (Family::Gemini, "gemini-function-call-parallel-vertex.json"),
            (
                Family::Gemini,
                "gemini-function-call-thought-signature-2.5-pro-devapi.json",
            ),
            (
                Family::Gemini,
                "gemini-generate-implicit-cache-2.5-flash-vertex.json",
            ),
            (
                Family::Gemini,
                "gemini-generate-text-gemini3-pro-devapi.json",
            ),
            (
                Family::Gemini,
                "gemini-generate-thinking-2.5-flash-devapi.json",
            ),
            (
                Family::Gemini,
                "gemini-generate-tool-use-prompt-tokens-devapi.json",
            ),
            (
                Family::Gemini,
                "gemini-generate-vertex-global-2.0-flash.json",
            ),
            (Family::Gemini, "gemini-prompt-blocked-safety-vertex.json"),
            (
                Family::Anthropic,
                "anthropic-message-cache-read-and-write.json",
            ),
            (Family::Anthropic, "anthropic-message-text.json"),
            (Family::Anthropic, "anthropic-message-thinking.json"),
        ];
        for (family, name) in answers {
            for exclude_reasoning in [false, true] {
                let cx = ResponseCx {
                    exclude_reasoning,
                    ..cx()
                };
                let body = fixture(name);
                let chat = crate::providers::adapter_for(family)
                    .translate_buffered(&body, &cx)
                    .unwrap();
                for door in [Door::Messages, Door::Responses] {
                    let typed = bridged(door, family)
                        .translate_buffered(&body, &cx)
                        .unwrap();
                    let from_json = match door {
                        Door::Messages => messages::to_message(&chat.body, &chat.usage, &cx),
                        _ => responses::to_response(&chat.body, &chat.usage, &cx),
                    };
                    let what = format!("{name} on {door:?}, exclude_reasoning {exclude_reasoning}");
                    assert_eq!(typed.body, from_json.unwrap(), "{what}");
                    assert_eq!(
                        (&typed.usage, &typed.upstream_id),
                        (&chat.usage, &chat.upstream_id),
                        "{what}"
                    );
                }
            }
        }
    }

    #[test]
    fn openai_compatible_upstreams_get_the_chat_body() {
        let req = json!({"model": "acme/gpt", "max_tokens": 5, "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let chat = to_chat(&serde_json::to_vec(&req).unwrap()).unwrap();
        let raw = RawRequest::parse(&chat, Operation::Chat).unwrap();
        let (mut m, r) = (gemini_model(), gemini_route());
        m.family = Family::OpenAiCompat;
        m.upstream_model = "gpt-x".into();
        let up = single(
            bridged(Door::Messages, Family::OpenAiCompat)
                .plan(&raw, &target(&m, &r, true), &creds())
                .unwrap(),
        );
        assert_eq!(up.path, "/base/chat/completions");
        let body: Value = serde_json::from_slice(&up.body).unwrap();
        assert_eq!(
            body,
            json!({"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                "stream": true, "stream_options": {"include_usage": true}})
        );
    }

    /// An adapter whose every answer is recognisable, to see the bridge hand calls through.
    struct Marked;

    impl Adapter for Marked {
        fn plan(
            &self,
            req: &RawRequest<'_>,
            _target: &Target<'_>,
            _creds: &Credentials,
        ) -> Result<Plan, GatewayError> {
            Ok(Plan::single(UpstreamRequest {
                path: format!("/plan/{}", req.model),
                headers: Vec::new(),
                body: Bytes::new(),
            }))
        }
        fn translate_buffered(
            &self,
            _body: &[u8],
            _cx: &ResponseCx,
        ) -> Result<Translated, TranslateError> {
            Err(TranslateError::Shape("marked".into()))
        }
        fn stream_translator(&self, cx: ResponseCx) -> Box<dyn StreamTranslator> {
            crate::providers::openai_compat::OpenAiCompat.stream_translator(cx)
        }
        fn upstream_error_message(&self, status: u16, body: &[u8]) -> String {
            format!("marked {status} {}", body.len())
        }
        fn count_tokens(
            &self,
            _req: &RawRequest<'_>,
            _target: &Target<'_>,
            _creds: &Credentials,
        ) -> Result<UpstreamRequest, GatewayError> {
            Ok(UpstreamRequest {
                path: "/count".into(),
                headers: Vec::new(),
                body: Bytes::new(),
            })
        }
        fn read_count(&self, body: &[u8]) -> Result<u64, TranslateError> {
            Ok(body.len() as u64)
        }
    }

    impl ChatAdapter for Marked {
        fn translate_answer(
            &self,
            _body: &[u8],
            _cx: &ResponseCx,
            _door: &dyn crate::providers::chat_answer::AnswerRender,
        ) -> Result<Translated, TranslateError> {
            Err(TranslateError::Shape("marked".into()))
        }
        fn chat_stream(
            &self,
            cx: ResponseCx,
        ) -> Box<dyn crate::providers::chat_stream::ChatStream> {
            crate::providers::openai_compat::OpenAiCompat.chat_stream(cx)
        }
    }

    #[test]
    fn everything_but_the_answers_is_the_inner_adapters() {
        static MARKED: Bridged = Bridged {
            inner: &Marked,
            door: Door::Messages,
        };
        let raw = RawRequest::parse(
            br#"{"model":"x/y","messages":[{"role":"user","content":"hi"}]}"#,
            Operation::Chat,
        )
        .unwrap();
        let (m, r) = (gemini_model(), gemini_route());
        let t = target(&m, &r, false);
        assert_eq!(
            single(MARKED.plan(&raw, &t, &creds()).unwrap()).path,
            "/plan/x/y"
        );
        assert_eq!(
            MARKED.count_tokens(&raw, &t, &creds()).unwrap().path,
            "/count"
        );
        assert_eq!(MARKED.read_count(b"1234").unwrap(), 4);
        assert_eq!(MARKED.upstream_error_message(429, b"abc"), "marked 429 3");
        assert_eq!(
            MARKED.translate_buffered(b"{}", &cx()).unwrap_err(),
            TranslateError::Shape("marked".into())
        );
        let body = fixture("gemini-error-429-resource-exhausted.json");
        assert_eq!(
            bridged(Door::Messages, Family::Gemini).upstream_error_message(429, &body),
            crate::providers::gemini::Gemini.upstream_error_message(429, &body)
        );
    }
}
