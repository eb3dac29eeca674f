//! Gemini `streamGenerateContent?alt=sse` → OpenAI `chat.completion.chunk` frames.
//!
//! Why a state machine: Pingora's body filter is synchronous and sees arbitrary byte
//! boundaries. Every Gemini event is a complete `GenerateContentResponse` whose parts are
//! deltas, so each part becomes one chunk as soon as its event is complete — nothing is held
//! back beyond one SSE event.
//!
//! Invariants:
//! - output never depends on how the upstream bytes were cut (tests split every fixture at
//!   every offset, and a proptest makes several cuts);
//! - the first delta of a choice carries `role: "assistant"`; thought text goes to
//!   `delta.reasoning` unless the client excluded reasoning; each `functionCall` part is one
//!   complete tool-call delta (minted id with its signature, name, full `arguments`);
//! - usage: the last `usageMetadata` that has counts wins (Developer API chunks carry running
//!   totals, Vertex's intermediate ones only `trafficType`); chunks are never added up;
//! - a clean end is the finish chunk(s) (mapped `finishReason`), one `choices: []` usage chunk,
//!   then `data: [DONE]`; an end without any `finishReason` is an error frame, then `[DONE]`;
//! - an error — a data event holding `error`, a bare JSON `{"error": …}` object outside the
//!   SSE format (what Vertex appends; read through the framer's stray lines), or an event that
//!   is not JSON — is one error frame; after it only `[DONE]` follows, at the end.
//!
//! Fixtures: `gemini-stream-*.sse`, `gemini-stream-*.chunks.jsonl` (framed as `data:` events
//! by the tests), `gemini-stream-error-mid-stream-vertex.txt`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::in_stream_message;
use super::response::{tool_call, Finish, GenerateResponse, Part, UsageMetadata};
use crate::api::chunk::Delta;
use crate::api::Usage;
use crate::providers::chat_stream::{
    send_delta, send_finish, send_usage, ChatFrame, ChatSink, ChatStream,
};
use crate::providers::sse::{SseFramer, SseItem};
use crate::providers::ResponseCx;

/// Candidates per request are at most 8 (`candidateCount`); more is a malformed stream.
const MAX_CHOICES: usize = 8;
/// A bare JSON error object is small; a longer run of stray lines is not one.
const MAX_STRAY: usize = 64 * 1024;

pub(super) struct GeminiStream {
    cx: ResponseCx,
    framer: SseFramer,
    usage: Usage,
    /// Per candidate index, in order of first appearance.
    choices: Vec<(u32, ChoiceState)>,
    /// Tool calls minted so far (numbers the ids).
    calls: usize,
    /// The prompt was blocked (`promptFeedback.blockReason`).
    blocked: bool,
    /// Stray (non-SSE) lines that may be the start of a JSON error object.
    stray: Vec<u8>,
    error: Option<String>,
    /// Bytes of model output written to the client (`StreamTranslator::delivered`).
    delivered: u64,
}

#[derive(Default)]
struct ChoiceState {
    started: bool,
    tool_calls: u32,
    finish: Option<Finish>,
}

/// A JSON object written outside the SSE format; only its `error` matters.
#[derive(Deserialize)]
struct Bare<'a> {
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

impl GeminiStream {
    pub fn new(cx: ResponseCx) -> Self {
        Self {
            cx,
            framer: SseFramer::default(),
            usage: Usage::default(),
            choices: Vec::new(),
            calls: 0,
            blocked: false,
            stray: Vec::new(),
            error: None,
            delivered: 0,
        }
    }

    fn on_item(&mut self, item: SseItem, out: &mut dyn ChatSink) {
        match item {
            SseItem::Event(ev) => self.on_event(&ev.data, out),
            SseItem::Stray(line) => self.on_stray(&line, out),
        }
    }

    fn on_event(&mut self, data: &[u8], out: &mut dyn ChatSink) {
        self.stray.clear();
        // An event without data (a bare `event:` line) carries nothing to translate.
        if self.error.is_some() || data.trim_ascii().is_empty() {
            return;
        }
        let resp: GenerateResponse = match crate::api::json::from_slice(data) {
            Ok(r) => r,
            Err(e) => return self.fail(format!("upstream sent malformed JSON: {e}"), out),
        };
        if let Some(error) = resp.error {
            return self.fail(in_stream_message(error), out);
        }
        if let Some(u) = resp.usage_metadata.as_ref().and_then(UsageMetadata::usage) {
            self.usage = u;
        }
        self.blocked |= resp.blocked();
        for (pos, cand) in resp.candidates.iter().enumerate() {
            let index = cand.index.unwrap_or(u32::try_from(pos).unwrap_or(u32::MAX));
            if self.choice(index).is_none() {
                return self.fail(format!("upstream sent candidate index {index}"), out);
            }
            for part in cand.parts() {
                self.on_part(index, part, out);
            }
            if let (Some(reason), Some(state)) = (cand.finish_reason.as_deref(), self.choice(index))
            {
                state.finish = Some(Finish::of(reason));
            }
        }
    }

    fn on_part(&mut self, index: u32, part: &Part<'_>, out: &mut dyn ChatSink) {
        let mut delta = Delta::default();
        if let Some(call) = &part.function_call {
            let mut tc = tool_call(&self.cx.id, self.calls, call, part);
            self.calls += 1;
            let Some(state) = self.choice(index) else {
                return;
            };
            tc.index = Some(state.tool_calls);
            state.tool_calls += 1;
            delta.tool_calls = Some([tc]);
            return self.write_delta(index, delta, out);
        }
        let Some(text) = part.text.as_deref().filter(|t| !t.is_empty()) else {
            return;
        };
        if !part.thought {
            delta.content = Some(text);
        } else if !self.cx.exclude_reasoning {
            delta.reasoning = Some(text);
        } else {
            return;
        }
        self.write_delta(index, delta, out);
    }

    /// Writes one delta chunk; the choice's first one names the role.
    fn write_delta(&mut self, index: u32, mut delta: Delta<'_>, out: &mut dyn ChatSink) {
        if let Some(state) = self.choice(index) {
            if !state.started {
                state.started = true;
                delta.role = Some("assistant");
            }
        }
        self.delivered += delta.content_len();
        send_delta(out, &self.cx, index, delta, None, &self.usage);
    }

    /// The state of candidate `index`, created on first sight (`None` past the limit).
    fn choice(&mut self, index: u32) -> Option<&mut ChoiceState> {
        let at = match self.choices.iter().position(|(i, _)| *i == index) {
            Some(at) => at,
            None if self.choices.len() < MAX_CHOICES => {
                self.choices.push((index, ChoiceState::default()));
                self.choices.len() - 1
            }
            None => return None,
        };
        self.choices.get_mut(at).map(|(_, state)| state)
    }

    /// A line outside the SSE format: collected while it can still be a JSON object.
    fn on_stray(&mut self, line: &[u8], out: &mut dyn ChatSink) {
        if self.error.is_some()
            || (self.stray.is_empty() && !line.trim_ascii_start().starts_with(b"{"))
        {
            return;
        }
        self.stray.extend_from_slice(line);
        self.stray.push(b'\n');
        let message = match serde_json::from_slice::<Bare>(&self.stray) {
            Ok(bare) => bare.error.map(in_stream_message),
            Err(e) if e.is_eof() && self.stray.len() <= MAX_STRAY => return,
            Err(_) => None,
        };
        self.stray.clear();
        if let Some(message) = message {
            self.fail(message, out);
        }
    }

    fn fail(&mut self, message: String, out: &mut dyn ChatSink) {
        out.frame(ChatFrame::Error(&message), &self.usage);
        self.error = Some(message);
    }

    /// Every candidate seen has finished, or the prompt was blocked (no candidates).
    fn complete(&self) -> bool {
        self.blocked
            || (!self.choices.is_empty() && self.choices.iter().all(|(_, c)| c.finish.is_some()))
    }

    fn write_finish(&mut self, out: &mut dyn ChatSink) {
        if self.blocked && self.choices.is_empty() {
            self.choices.push((0, ChoiceState::default()));
        }
        for (index, state) in &self.choices {
            // Only a blocked prompt leaves a choice without a finish reason here.
            let finish = state.finish.unwrap_or(Finish::Filter);
            let reason = finish.openai(state.tool_calls > 0);
            send_finish(out, &self.cx, *index, reason, &self.usage);
        }
        send_usage(out, &self.cx, self.cx.created, &self.usage);
    }
}

impl ChatStream for GeminiStream {
    fn feed(&mut self, chunk: &[u8], out: &mut dyn ChatSink) {
        self.framer.push(chunk);
        while let Some(item) = self.framer.next_item() {
            self.on_item(item, out);
        }
    }

    fn finish(&mut self, out: &mut dyn ChatSink) {
        for item in self.framer.finish_items() {
            self.on_item(item, out);
        }
        if self.error.is_none() {
            if self.complete() {
                self.write_finish(out);
            } else {
                self.fail("upstream stream ended before completion".into(), out);
            }
        }
        out.frame(ChatFrame::Done, &self.usage);
    }

    fn usage(&self) -> Usage {
        self.usage
    }

    fn failed(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn delivered(&self) -> u64 {
        self.delivered
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{cx, fixture, frames, run_stream};
    use super::*;
    use crate::providers::Adapter;
    use bytes::BytesMut;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn stream_bytes(name: &str) -> Vec<u8> {
        crate::providers::test_support::stream_fixture(name, false, "\r\n\r\n")
    }

    /// The Gemini events of a fixture, parsed independently of the translator.
    fn gemini_events(bytes: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(bytes).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap())
            .collect()
    }

    /// A function call as the fixture has it: name, args, thought signature.
    type Call = (String, Value, Option<String>);

    /// What the client must see: answer text, thought text, and the calls.
    fn expected(events: &[Value]) -> (String, String, Vec<Call>) {
        let (mut content, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
        for ev in events {
            for part in ev["candidates"][0]["content"]["parts"].as_array().unwrap() {
                if let Some(call) = part.get("functionCall") {
                    let sig = part["thoughtSignature"].as_str().map(str::to_owned);
                    calls.push((
                        call["name"].as_str().unwrap().to_owned(),
                        call["args"].clone(),
                        sig,
                    ));
                } else if part["thought"] == true {
                    reasoning.push_str(part["text"].as_str().unwrap());
                } else {
                    content.push_str(part["text"].as_str().unwrap_or(""));
                }
            }
        }
        (content, reasoning, calls)
    }

    struct Case {
        file: &'static str,
        finish: &'static str,
        usage: Usage,
    }

    fn usage(input: u64, output: u64, reasoning: u64) -> Usage {
        Usage {
            input,
            cache_read: 0,
            cache_write: 0,
            output,
            reasoning,
            ..Usage::default()
        }
    }

    fn cases() -> [Case; 6] {
        [
            Case {
                file: "gemini-stream-2.0-flash-devapi.sse",
                finish: "stop",
                usage: usage(13, 8, 0),
            },
            Case {
                file: "gemini-stream-thinking-2.5-flash-devapi.sse",
                finish: "stop",
                usage: usage(10, 48 + 540, 540),
            },
            Case {
                file: "gemini-stream-thinking-2.5-flash-vertex.sse",
                finish: "stop",
                usage: usage(9, 134 + 1067, 1067),
            },
            Case {
                file: "gemini-stream-thinking-2.5-pro-devapi.sse",
                finish: "stop",
                usage: usage(34, 469 + 787, 787),
            },
            Case {
                file: "gemini-stream-function-call-thought-signature-2.5-flash-devapi.sse",
                finish: "tool_calls",
                usage: usage(38, 6 + 168, 168),
            },
            Case {
                file: "gemini-stream-text-gemini3-pro-devapi.chunks.jsonl",
                finish: "stop",
                usage: usage(9, 23 + 185, 185),
            },
        ]
    }

    fn concat(frames: &[Value], field: &str) -> String {
        frames
            .iter()
            .filter_map(|f| f["choices"][0]["delta"][field].as_str())
            .collect()
    }

    #[test]
    fn stream_fixtures_translate_exactly() {
        for case in cases() {
            let name = case.file;
            let input = stream_bytes(name);
            let (content, reasoning, calls) = expected(&gemini_events(&input));
            let mut t = super::super::Gemini.stream_translator(cx());
            let mut out = BytesMut::new();
            t.feed(&input, &mut out);
            t.finish(&mut out);
            let f = frames(&out);
            assert_eq!(t.failed(), None, "{name}");
            assert_eq!(t.usage(), case.usage, "{name}: usage buckets");

            let (done, rest) = f.split_last().unwrap();
            let (usage_chunk, rest) = rest.split_last().unwrap();
            let (finish_chunk, deltas) = rest.split_last().unwrap();
            assert_eq!(done, "[DONE]", "{name}");
            assert_eq!(usage_chunk["choices"], json!([]), "{name}");
            assert_eq!(
                usage_chunk["usage"],
                serde_json::to_value(case.usage.to_openai()).unwrap(),
                "{name}"
            );
            assert_eq!(
                finish_chunk["choices"],
                json!([{"index": 0, "delta": {}, "finish_reason": case.finish}]),
                "{name}"
            );
            for c in rest {
                assert_eq!(c["id"], "chatcmpl-gw7", "{name}");
                assert_eq!(c["object"], "chat.completion.chunk", "{name}");
                assert_eq!(c["created"], 1_700_000_000, "{name}");
                assert_eq!(c["model"], "google/gemini-test", "{name}");
                assert!(
                    c.get("usage").is_none(),
                    "{name}: usage only in the usage chunk"
                );
            }
            for (i, d) in deltas.iter().enumerate() {
                assert_eq!(d["choices"][0]["finish_reason"], Value::Null, "{name}");
                let role = &d["choices"][0]["delta"]["role"];
                assert_eq!(
                    *role,
                    if i == 0 {
                        json!("assistant")
                    } else {
                        Value::Null
                    },
                    "{name}: delta {i}"
                );
            }
            assert_eq!(concat(deltas, "content"), content, "{name}: content");
            assert_eq!(concat(deltas, "reasoning"), reasoning, "{name}: reasoning");
            let got_calls: Vec<&Value> = deltas
                .iter()
                .filter_map(|d| d["choices"][0]["delta"].get("tool_calls"))
                .collect();
            assert_eq!(got_calls.len(), calls.len(), "{name}");
            for (k, (got, (fname, args, sig))) in got_calls.iter().zip(&calls).enumerate() {
                let call = &got[0];
                assert_eq!(call["index"], k, "{name}");
                assert_eq!(call["type"], "function", "{name}");
                assert_eq!(call["function"]["name"], fname.as_str(), "{name}");
                let parsed: Value =
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
                assert_eq!(&parsed, args, "{name}");
                let id = call["id"].as_str().unwrap();
                assert_eq!(
                    super::super::call_id_signature(id),
                    sig.clone(),
                    "{name}: the id carries the part's signature"
                );
            }
        }
    }

    #[test]
    fn stream_output_is_independent_of_splits() {
        let mut names: Vec<&str> = cases().iter().map(|c| c.file).collect();
        names.push("gemini-stream-error-mid-stream-vertex.txt");
        for name in names {
            let input = stream_bytes(name);
            let whole = run_stream(cx(), &input, &[]);
            for cut in 0..=input.len() {
                assert_eq!(
                    run_stream(cx(), &input, &[cut]),
                    whole,
                    "{name}: split at {cut}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn many_cuts_change_nothing(file in 0usize..7, cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..24)) {
            let name = match cases().get(file) {
                Some(c) => c.file,
                None => "gemini-stream-error-mid-stream-vertex.txt",
            };
            let input = stream_bytes(name);
            let mut at: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            at.sort_unstable();
            prop_assert_eq!(run_stream(cx(), &input, &at), run_stream(cx(), &input, &[]), "{} cut at {:?}", name, at);
        }
    }

    #[test]
    fn bare_json_error_after_data_ends_the_stream() {
        let input = fixture("gemini-stream-error-mid-stream-vertex.txt");
        let mut t = super::super::Gemini.stream_translator(cx());
        let mut out = BytesMut::new();
        t.feed(&input, &mut out);
        t.finish(&mut out);
        let f = frames(&out);
        assert_eq!(concat(&f, "content"), "First Second ");
        assert_eq!(f.len(), 4, "two deltas, the error, [DONE]: {f:?}");
        assert_eq!(f[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            f[2],
            json!({"error": {"message": "The operation was cancelled. (CANCELLED)", "type": "upstream_error", "code": "upstream_error"}})
        );
        assert_eq!(f[3], "[DONE]");
        assert_eq!(t.failed(), Some("The operation was cancelled. (CANCELLED)"));
    }

    #[test]
    fn error_event_and_garbage() {
        let ok = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}\r\n\r\n";
        let cases = [
            (
                format!("{ok}data: {{\"error\":{{\"code\":500,\"message\":\"boom\",\"status\":\"INTERNAL\"}}}}\r\n\r\n{ok}"),
                "boom (INTERNAL)",
            ),
            (format!("{ok}data: not json\r\n\r\n{ok}"), "upstream sent malformed JSON"),
            (format!("event: ping\r\n\r\n{ok}"), "upstream stream ended before completion"),
            (ok.to_owned(), "upstream stream ended before completion"),
            (String::new(), "upstream stream ended before completion"),
            (format!("{ok}{{\"error\": {{\"message\": \"bare\"}}}}"), "bare"),
        ];
        for (input, message) in cases {
            let mut t = super::super::Gemini.stream_translator(cx());
            let mut out = BytesMut::new();
            t.feed(input.as_bytes(), &mut out);
            t.finish(&mut out);
            let f = frames(&out);
            let errors: Vec<&Value> = f.iter().filter(|v| v.get("error").is_some()).collect();
            assert_eq!(errors.len(), 1, "{input:?}: {f:?}");
            assert!(
                errors[0]["error"]["message"]
                    .as_str()
                    .unwrap()
                    .starts_with(message),
                "{input:?}: {f:?}"
            );
            assert!(t.failed().unwrap().starts_with(message));
            assert_eq!(f.last().unwrap(), "[DONE]");
            assert!(
                f.iter().all(|v| v.get("usage").is_none()),
                "no usage chunk after an error"
            );
            let after: Vec<&Value> = f
                .iter()
                .skip_while(|v| v.get("error").is_none())
                .skip(1)
                .collect();
            assert_eq!(
                after,
                [&json!("[DONE]")],
                "nothing but [DONE] after the error"
            );
        }
    }

    #[test]
    fn stray_lines_that_are_not_errors_are_ignored() {
        let input = "{\"note\": 1}\nhello\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]},\"finishReason\":\"MAX_TOKENS\"}],\"usageMetadata\":{\"promptTokenCount\":3,\"candidatesTokenCount\":1,\"totalTokenCount\":4}}\n\n";
        let out = run_stream(cx(), input.as_bytes(), &[]);
        let f = frames(&out);
        assert_eq!(f.len(), 4, "{f:?}");
        assert_eq!(f[1]["choices"][0]["finish_reason"], "length");
        assert_eq!(f[2]["usage"]["total_tokens"], 4);
    }

    #[test]
    fn excluded_reasoning_is_never_streamed() {
        let mut c = cx();
        c.exclude_reasoning = true;
        let input = fixture("gemini-stream-thinking-2.5-flash-devapi.sse");
        let f = frames(&run_stream(c, &input, &[]));
        assert_eq!(concat(&f, "reasoning"), "");
        assert_eq!(
            f[0]["choices"][0]["delta"]["role"], "assistant",
            "role comes with the first content"
        );
        assert!(f[0]["choices"][0]["delta"]["content"].is_string());
        assert_eq!(
            f[f.len() - 2]["usage"]["completion_tokens_details"]["reasoning_tokens"],
            540
        );
    }

    #[test]
    fn blocked_prompt_and_parallel_calls() {
        let blocked = "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":7,\"totalTokenCount\":7}}\r\n\r\n";
        let f = frames(&run_stream(cx(), blocked.as_bytes(), &[]));
        assert_eq!(
            f[0]["choices"],
            json!([{"index": 0, "delta": {}, "finish_reason": "content_filter"}])
        );
        assert_eq!(f[1]["usage"]["prompt_tokens"], 7);
        assert_eq!(f[2], "[DONE]");

        let parallel =
            String::from_utf8(fixture("gemini-function-call-parallel-vertex.json")).unwrap();
        let input = format!("data: {}\r\n\r\n", parallel.replace('\n', ""));
        let f = frames(&run_stream(cx(), input.as_bytes(), &[]));
        let ids: Vec<(&Value, &Value)> = f[..3]
            .iter()
            .map(|c| {
                let tc = &c["choices"][0]["delta"]["tool_calls"][0];
                (&tc["index"], &tc["id"])
            })
            .collect();
        assert_eq!(
            ids,
            [
                (&json!(0), &json!("call_gw7_0")),
                (&json!(1), &json!("call_gw7_1")),
                (&json!(2), &json!("call_gw7_2"))
            ]
        );
        assert_eq!(f[3]["choices"][0]["finish_reason"], "tool_calls");
    }

    #[test]
    fn vertex_usage_comes_from_the_last_chunk_with_counts() {
        let input = fixture("gemini-stream-thinking-2.5-flash-vertex.sse");
        let mut t = super::super::Gemini.stream_translator(cx());
        let mut out = BytesMut::new();
        let cut = input.len() - 10;
        t.feed(&input[..cut], &mut out);
        assert_eq!(
            t.usage(),
            Usage::default(),
            "trafficType-only usage has no counts"
        );
        t.feed(&input[cut..], &mut out);
        t.finish(&mut out);
        assert_eq!(t.usage().output, 134 + 1067);
    }
}
