//! Translation throughput on captured fixtures: the per-request CPU the gateway adds in the
//! response path. Run with `make bench`; numbers are printed, never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tollgate::api::Operation;
use tollgate::catalog::Family;
use tollgate::providers::{adapter_for, Adapter, ResponseCx};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");

fn main() {
    let cx = ResponseCx {
        id: Arc::from("chatcmpl-bench"),
        model_id: Arc::from("acme/bench"),
        op: Operation::Chat,
        created: 1,
        exclude_reasoning: false,
    };
    let openai = adapter_for(Family::OpenAiCompat);
    buffered(
        "openai-compat",
        openai,
        &cx,
        "openai-chat-completion.json",
        200_000,
    );
    stream(
        "openai-compat",
        openai,
        &cx,
        "openai-chat-stream-text-usage.sse",
        50_000,
    );
    let gemini = adapter_for(Family::Gemini);
    buffered(
        "gemini",
        gemini,
        &cx,
        "gemini-function-call-thought-signature-2.5-pro-devapi.json",
        100_000,
    );
    stream(
        "gemini",
        gemini,
        &cx,
        "gemini-stream-thinking-2.5-pro-devapi.sse",
        10_000,
    );
}

fn buffered(label: &str, adapter: &dyn Adapter, cx: &ResponseCx, file: &str, n: u32) {
    let body = std::fs::read(format!("{DIR}{file}")).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(adapter.translate_buffered(&body, cx).unwrap());
    }
    let per = t.elapsed() / n;
    println!(
        "{label} buffered {file} ({} B): {per:?}/response ({:.0}/s on one core)",
        body.len(),
        1.0 / per.as_secs_f64()
    );
}

fn stream(label: &str, adapter: &dyn Adapter, cx: &ResponseCx, file: &str, n: u32) {
    let stream = std::fs::read(format!("{DIR}{file}")).unwrap();
    let t = Instant::now();
    for _ in 0..n {
        let mut tr = adapter.stream_translator(cx.clone());
        let mut out = BytesMut::new();
        for piece in stream.chunks(512) {
            tr.feed(piece, &mut out);
        }
        tr.finish(&mut out);
        std::hint::black_box(out);
    }
    let per = t.elapsed() / n;
    println!(
        "{label} stream {file} ({} B) in 512 B reads: {per:?}/stream ({:.0}/s on one core)",
        stream.len(),
        1.0 / per.as_secs_f64()
    );
}
