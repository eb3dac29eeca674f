//! Translation throughput on captured fixtures: the per-request CPU the gateway adds in the
//! response path. Run with `make bench`; numbers are printed, never asserted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tollgate::api::Operation;
use tollgate::providers::{adapter_for, ResponseCx};

fn main() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/");
    let adapter = adapter_for(tollgate::catalog::Family::OpenAiCompat).unwrap();
    let cx = ResponseCx {
        id: Arc::from("chatcmpl-bench"),
        model_id: Arc::from("acme/bench"),
        op: Operation::Chat,
        created: 1,
        exclude_reasoning: false,
    };

    let body = std::fs::read(format!("{dir}openai-chat-completion.json")).unwrap();
    let n = 200_000;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(adapter.translate_buffered(&body, &cx).unwrap());
    }
    let per = t.elapsed() / n;
    println!(
        "openai-compat buffered {} B: {per:?}/response ({:.0}/s on one core)",
        body.len(),
        1.0 / per.as_secs_f64()
    );

    let stream = std::fs::read(format!("{dir}openai-chat-stream-text-usage.sse")).unwrap();
    let n = 50_000;
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
        "openai-compat stream {} B in 512 B reads: {per:?}/stream ({:.0}/s on one core)",
        stream.len(),
        1.0 / per.as_secs_f64()
    );
}
