"""The official Anthropic Python SDK against tollgate's Messages door, unmodified: only base_url
and api_key change.

Run by tests/it/messages_clients.rs with:
- TOLLGATE_BASE_URL (the gateway, without /v1), TOLLGATE_KEY, TOLLGATE_MODEL;
- TOLLGATE_THINKING: `enabled` (a budget, as Claude Sonnet 4.5 takes it) or `adaptive`;
- TOLLGATE_GATEWAY=1: the gateway's own checks too (the `x-api-key` header, the error bodies'
  tollgate `code`, the 404's message), and the keys for the refusals: TOLLGATE_REVOKED_KEY,
  TOLLGATE_EXPIRED_KEY, TOLLGATE_NO_CREDIT_KEY (402), TOLLGATE_LIMITED_KEY (429; the test
  has already spent past its limit). A refusal whose key is unset is skipped (and left out of
  the `ok:` line), so the script also runs against the simulator directly.

The answers follow the simulator's rules (sim/src/content.rs): "Echo: <last user text>",
"Thinking: <text>", `[sim:call=NAME]` + `[sim:args=JSON]` make a tool call. Exits non-zero
(with the reason) on the first mismatch; prints one `ok: …` line.

This SDK sends its api_key as `Authorization: Bearer` (and `anthropic-version: 2026-10-21`);
the simulator's direct API takes only `x-api-key`, so without TOLLGATE_GATEWAY the key goes in
that header instead.
"""
import os
import sys
import uuid
import warnings

import anthropic

# The SDK warns about the models it knows are deprecated (claude-sonnet-4-5).
warnings.filterwarnings("ignore", category=DeprecationWarning)

BASE = os.environ["TOLLGATE_BASE_URL"]
KEY = os.environ["TOLLGATE_KEY"]
MODEL = os.environ["TOLLGATE_MODEL"]
THINKING = os.environ.get("TOLLGATE_THINKING", "enabled")
GATEWAY = os.environ.get("TOLLGATE_GATEWAY") == "1"
IS_CLAUDE = "claude" in MODEL



def make_client(key, x_api_key=not GATEWAY):
    """The SDK as a user sets it up; `x_api_key`: the key in `x-api-key` instead of Bearer."""
    if x_api_key:
        headers = {"x-api-key": key, "Authorization": anthropic.Omit()}
        return anthropic.Anthropic(base_url=BASE, api_key=key, max_retries=0, default_headers=headers)
    return anthropic.Anthropic(base_url=BASE, api_key=key, max_retries=0)


client = make_client(KEY)
done = []


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def texts(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


# --- create (buffered text)
reply = client.messages.create(
    model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "hello sdk"}]
)
check(reply.type == "message" and reply.role == "assistant", f"message {reply}")
check(texts(reply) == "Echo: hello sdk", f"text {reply.content}")
check(reply.stop_reason == "end_turn", f"stop_reason {reply.stop_reason}")
check(reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0, f"usage {reply.usage}")
plain_input = reply.usage.input_tokens
done.append("create")

if GATEWAY:
    # The other credential header, as Claude Code sends ANTHROPIC_API_KEY: `x-api-key`.
    r = make_client(KEY, x_api_key=True).messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x-api-key sdk"}]
    )
    check(texts(r) == "Echo: x-api-key sdk", f"x-api-key text {r.content}")
    done.append("x-api-key")

# --- stream (text_stream + get_final_message)
with client.messages.stream(
    model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "stream sdk [sim:chunks=4]"}]
) as stream:
    streamed = "".join(stream.text_stream)
    final = stream.get_final_message()
check(streamed == "Echo: stream sdk", f"streamed text {streamed!r}")
check(texts(final) == "Echo: stream sdk", f"final message {final.content}")
check(final.stop_reason == "end_turn", f"streamed stop_reason {final.stop_reason}")
check(final.usage.output_tokens > 0, f"streamed usage {final.usage}")
done.append("stream")

# --- a two-turn tool loop
tools = [
    {
        "name": "get_weather",
        "description": "The weather in a city.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }
]
question = {
    "role": "user",
    "content": 'Weather in Paris? [sim:call=get_weather] [sim:args={"city":"Paris"}]',
}
first = client.messages.create(model=MODEL, max_tokens=512, tools=tools, messages=[question])
check(first.stop_reason == "tool_use", f"tool stop_reason {first.stop_reason} {first.content}")
calls = [b for b in first.content if b.type == "tool_use"]
check(len(calls) == 1, f"one tool_use {first.content}")
call = calls[0]
check(call.name == "get_weather" and call.input == {"city": "Paris"}, f"tool_use {call}")
check(bool(call.id), f"tool_use id {call}")
second = client.messages.create(
    model=MODEL,
    max_tokens=512,
    tools=tools,
    messages=[
        question,
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}],
        },
    ],
)
check(second.stop_reason == "end_turn", f"final stop_reason {second.stop_reason}")
check(texts(second) == "Echo: received 1 tool result(s)", f"final answer {second.content}")
done.append("tools")

# --- thinking
if THINKING == "enabled":
    thinking = {"type": "enabled", "budget_tokens": 1024}
else:
    thinking = {"type": "adaptive"}
thought = client.messages.create(
    model=MODEL, max_tokens=4096, thinking=thinking, messages=[{"role": "user", "content": "think sdk"}]
)
check(texts(thought) == "Echo: think sdk", f"thinking answer {thought.content}")
blocks = [b for b in thought.content if b.type == "thinking"]
if THINKING == "enabled":
    check(len(blocks) == 1, f"one thinking block {thought.content}")
    check(thought.content[0].type == "thinking", f"thinking comes first {thought.content}")
    check(bool(blocks[0].signature), f"thinking signature {blocks[0]}")
for b in blocks:
    check(b.thinking in ("Thinking: think sdk", ""), f"thinking text {b.thinking!r}")
check(thought.usage.output_tokens > 0, f"thinking usage {thought.usage}")
done.append(f"thinking {THINKING}")

# --- prompt caching: one cache_control system prompt, sent twice. Long enough for every
# model's minimum (Claude 1024-4096 tokens, the Gemini profiles' min_cache_tokens 2048-4096),
# unique per run so that the first request writes.
nonce = uuid.uuid4().hex
long_system = f"Run {nonce}. " + " ".join(
    f"Rule {i}: answer plainly and briefly, citing nothing." for i in range(400)
)
check(len(long_system) // 4 > 4096, "the cached prefix is long enough")


def cached_ask(text):
    return client.messages.create(
        model=MODEL,
        max_tokens=256,
        system=[{"type": "text", "text": long_system, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": text}],
    )


write = cached_ask("cache sdk one")
read = cached_ask("cache sdk two")
check(texts(read) == "Echo: cache sdk two", f"cached answer {read.content}")
if IS_CLAUDE:
    check((write.usage.cache_creation_input_tokens or 0) > 0, f"first request writes the cache: {write.usage}")
    check((write.usage.cache_read_input_tokens or 0) == 0, f"first request reads nothing: {write.usage}")
check((read.usage.cache_read_input_tokens or 0) > 0, f"second request reads the cache: {read.usage}")
done.append("cache")

# --- count_tokens
counted = client.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "hello sdk"}])
check(counted.input_tokens > 0, f"count_tokens {counted}")
check(counted.input_tokens == plain_input, f"count_tokens {counted.input_tokens} vs create's {plain_input}")
counted_tools = client.messages.count_tokens(model=MODEL, tools=tools, messages=[question])
check(counted_tools.input_tokens > counted.input_tokens, f"tools count {counted_tools}")
done.append("count_tokens")


# --- errors, as the SDK's exception classes
def refused(exc_class, status, key=KEY, model=MODEL, code=None, kind=None, message=None):
    c = make_client(key)
    try:
        c.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": "refuse me"}])
    except exc_class as e:
        check(e.status_code == status, f"{exc_class.__name__}: status {e.status_code}")
        body = e.body if isinstance(e.body, dict) else {}
        check(body.get("type") == "error", f"{exc_class.__name__}: error envelope {e.body!r}")
        err = body.get("error") or {}
        if kind:
            check(err.get("type") == kind, f"{exc_class.__name__}: error type {err}")
        if GATEWAY and code:
            check(err.get("code") == code, f"{exc_class.__name__}: tollgate code {err}")
        if GATEWAY and message:
            check(err.get("message") == message, f"{exc_class.__name__}: message {err}")
        return
    except anthropic.APIStatusError as e:
        check(False, f"expected {exc_class.__name__}, got {type(e).__name__} {e.status_code} {e.body!r}")
    check(False, f"expected {exc_class.__name__}, the request succeeded")


errors = []
refused(anthropic.AuthenticationError, 401, key="tg-not-a-key-" + nonce, code="invalid_key", kind="authentication_error")
errors.append("auth")
if os.environ.get("TOLLGATE_REVOKED_KEY"):
    refused(anthropic.AuthenticationError, 401, key=os.environ["TOLLGATE_REVOKED_KEY"], kind="authentication_error")
    errors.append("revoked")
if os.environ.get("TOLLGATE_EXPIRED_KEY"):
    refused(
        anthropic.AuthenticationError, 401, key=os.environ["TOLLGATE_EXPIRED_KEY"],
        code="expired_key", kind="authentication_error",
    )
    errors.append("expired")
unknown = "nope/none-" + nonce[:8]
refused(
    anthropic.NotFoundError, 404, model=unknown, code="model_not_found", kind="not_found_error",
    message=f'model "{unknown}" not found',
)
errors.append("not_found")
if os.environ.get("TOLLGATE_LIMITED_KEY"):
    refused(
        anthropic.RateLimitError, 429, key=os.environ["TOLLGATE_LIMITED_KEY"],
        code="spend_limit_exceeded", kind="rate_limit_error",
    )
    errors.append("rate_limit")
if os.environ.get("TOLLGATE_NO_CREDIT_KEY"):
    refused(
        anthropic.APIStatusError, 402, key=os.environ["TOLLGATE_NO_CREDIT_KEY"],
        code="insufficient_credit", kind="billing_error",
    )
    errors.append("payment")
done.append("errors(" + " ".join(errors) + ")")

print("ok: " + ", ".join(done))
