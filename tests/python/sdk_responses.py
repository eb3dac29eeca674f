"""The official OpenAI Python SDK's `responses.*` against tollgate's Responses door, unmodified:
only base_url and api_key change. The same checks as tests/agents/sdk_responses.mjs.

Run by tests/it/responses_clients.rs with:
- TOLLGATE_BASE_URL (the gateway, without /v1), TOLLGATE_KEY, TOLLGATE_MODEL;
- TOLLGATE_GATEWAY=1: the gateway's own checks too (the error bodies' tollgate `code`), and the
  keys for the refusals: TOLLGATE_REVOKED_KEY, TOLLGATE_EXPIRED_KEY, TOLLGATE_NO_CREDIT_KEY
  (402), TOLLGATE_LIMITED_KEY (429; the test has already spent past its limit). A refusal
  whose key is unset is skipped (and left out of the `ok:` line).

The answers follow the simulator's rules (sim/src/content.rs): "Echo: <last user text>",
"Thinking: <text>", `[sim:call=NAME]` + `[sim:args=JSON]` make a function call, JSON mode
answers {"echo":"<text>"}. Claude routes drop `text.format` (the chat adapter has no JSON mode
for Claude), so the JSON check runs on the other routes only. Exits non-zero (with the reason)
on the first mismatch; prints one `ok: …` line.
"""
import json
import os
import sys
import uuid

import openai

BASE = os.environ["TOLLGATE_BASE_URL"]
KEY = os.environ["TOLLGATE_KEY"]
MODEL = os.environ["TOLLGATE_MODEL"]
GATEWAY = os.environ.get("TOLLGATE_GATEWAY") == "1"
IS_CLAUDE = "claude" in MODEL


def make_client(key):
    return openai.OpenAI(base_url=BASE + "/v1", api_key=key, max_retries=0)


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def of_type(resp, kind):
    return [i for i in resp.output if i.type == kind]


def dump(items):
    return [i.model_dump(exclude_none=True) for i in items]


client = make_client(KEY)
done = []

# --- create (buffered text)
reply = client.responses.create(model=MODEL, instructions="Be brief.", input="hello sdk")
check(reply.object == "response" and reply.status == "completed", f"response {reply}")
check(reply.id.startswith("resp_"), f"id {reply.id}")
check(reply.output_text == "Echo: hello sdk", f"output_text {reply.output_text!r} of {reply.output}")
messages = of_type(reply, "message")
check(len(messages) == 1 and len(reply.output) == 1, f"one message item {reply.output}")
check(messages[0].role == "assistant" and messages[0].status == "completed", f"message {messages[0]}")
check(messages[0].content[0].type == "output_text", f"output_text part {messages[0].content}")
u = reply.usage
check(u.input_tokens > 0 and u.output_tokens > 0, f"usage {u}")
check(u.total_tokens == u.input_tokens + u.output_tokens, f"usage total {u}")
done.append("create")

# --- stream: every event in order, numbered, then the final response
with client.responses.stream(model=MODEL, input="stream sdk [sim:chunks=4]") as stream:
    events = list(stream)
    final = stream.get_final_response()
types = [e.type for e in events]
check(types[0] == "response.created" and types[-1] == "response.completed", f"event order {types}")
for i, e in enumerate(events):
    check(e.sequence_number == i, f"sequence_number {e.sequence_number} at {i}: {types}")
order = [
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]
firsts = [types.index(t) if t in types else -1 for t in order]
check(all(at > 0 for at in firsts) and firsts == sorted(firsts), f"event order {types}")
deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
check(len(deltas) >= 2, f"streamed in pieces: {len(deltas)}")
streamed = "".join(deltas)
check(streamed == "Echo: stream sdk", f"streamed text {streamed!r}")
check(next(e for e in events if e.type == "response.output_text.done").text == streamed, "output_text.done")
check(final.output_text == "Echo: stream sdk" and final.status == "completed", f"final {final}")
check(final.id == events[0].response.id, f"one id: {final.id} vs {events[0].response.id}")
check(final.usage.output_tokens > 0, f"streamed usage {final.usage}")
done.append("stream")

# --- a two-turn function-tool loop, stateless: the client sends the items back
tools = [
    {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
]
question = {
    "role": "user",
    "content": 'Weather in Paris? [sim:call=get_weather] [sim:args={"city":"Paris"}]',
}


def the_call(resp, what):
    calls = of_type(resp, "function_call")
    check(len(calls) == 1, f"{what}: one function_call {resp.output}")
    call = calls[0]
    check(call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}, f"{what}: {call}")
    check(bool(call.call_id) and call.status == "completed", f"{what}: call_id, status {call}")
    check(resp.output_text == "", f"{what}: no text {resp.output_text!r}")
    return call


def result(call):
    return {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}


first = client.responses.create(model=MODEL, tools=tools, store=False, input=[question])
call = the_call(first, "tools")
second = client.responses.create(
    model=MODEL, tools=tools, store=False, input=[question, *first.output, result(call)]
)
check(second.output_text == "Echo: received 1 tool result(s)", f"after the tool {second.output}")
# Not stored: nothing to retrieve.
try:
    client.responses.retrieve(first.id)
    check(False, f"a store=False response was retrieved: {first.id}")
except openai.NotFoundError:
    pass
done.append("tools")

# --- three turns on previous_response_id (stored by default): only the new items are sent
turn1 = client.responses.create(model=MODEL, tools=tools, input=[question])
call1 = the_call(turn1, "turn 1")
turn2 = client.responses.create(model=MODEL, tools=tools, previous_response_id=turn1.id, input=[result(call1)])
check(turn2.output_text == "Echo: received 1 tool result(s)", f"turn 2 {turn2.output}")
turn3 = client.responses.create(model=MODEL, tools=tools, previous_response_id=turn2.id, input="And tomorrow?")
check(turn3.output_text == "Echo: And tomorrow?", f"turn 3 {turn3.output}")
# The upstream saw the whole conversation: more prompt than the same question alone.
alone = client.responses.create(model=MODEL, tools=tools, store=False, input="And tomorrow?")
check(
    turn3.usage.input_tokens > alone.usage.input_tokens,
    f"turn 3 carries the conversation: {turn3.usage.input_tokens} vs {alone.usage.input_tokens} alone",
)
done.append("previous_response_id")

# --- reasoning: the encrypted content comes back and is sent back with the tool's result
think_question = {
    "role": "user",
    "content": 'Think, then weather in Paris? [sim:call=get_weather] [sim:args={"city":"Paris"}]',
}
reasoning_params = dict(
    model=MODEL,
    tools=tools,
    store=False,
    reasoning={"effort": "low", "summary": "auto"},
    include=["reasoning.encrypted_content"],
)
thought = client.responses.create(**reasoning_params, input=[think_question])
think_call = the_call(thought, "reasoning")
reasonings = of_type(thought, "reasoning")
check(len(reasonings) == 1, f"one reasoning item {thought.output}")
check(thought.output[0].type == "reasoning", f"reasoning comes first {thought.output}")
reasoning = reasonings[0]
summary = "".join(s.text for s in reasoning.summary)
check(summary == "Thinking: Think, then weather in Paris?", f"reasoning summary {reasoning.summary}")
if IS_CLAUDE:
    # Claude's signed thinking, which it must see again with the tool's result.
    check((reasoning.encrypted_content or "").startswith("tg1."), f"encrypted_content {reasoning}")
if not IS_CLAUDE:
    # Claude's usage does not count its thinking apart from the rest of the output.
    check(thought.usage.output_tokens_details.reasoning_tokens > 0, f"reasoning tokens {thought.usage}")
after_thought = client.responses.create(
    **reasoning_params, input=[think_question, *thought.output, result(think_call)]
)
check(after_thought.output_text == "Echo: received 1 tool result(s)", f"after reasoning {after_thought.output}")
done.append("reasoning")

# --- text.format json_schema
schema = {
    "type": "object",
    "properties": {"echo": {"type": "string"}},
    "required": ["echo"],
    "additionalProperties": False,
}
answer = client.responses.create(
    model=MODEL,
    input="json sdk",
    text={"format": {"type": "json_schema", "name": "echo", "schema": schema, "strict": True}},
)
if not IS_CLAUDE:
    try:
        parsed = json.loads(answer.output_text)
    except ValueError as e:
        sys.exit(f"FAILED: the json_schema answer does not parse ({e}): {answer.output_text!r}")
    check(parsed == {"echo": "json sdk"}, f"json_schema answer {parsed}")
    done.append("json_schema")
else:
    check(answer.output_text == "Echo: json sdk", f"json_schema answer on Claude {answer.output_text!r}")

# --- retrieve and delete a stored response
got = client.responses.retrieve(reply.id)
check(got.id == reply.id and got.status == "completed", f"retrieved {got}")
check(got.output_text == "Echo: hello sdk", f"retrieved output_text {got.output_text!r}")
check(dump(got.output) == dump(reply.output), f"retrieved output {got.output} vs {reply.output}")
client.responses.delete(reply.id)
try:
    client.responses.retrieve(reply.id)
    check(False, f"a deleted response was retrieved: {reply.id}")
except openai.NotFoundError:
    pass
done.extend(["retrieve", "delete"])


# --- errors, as the SDK's exception classes
def refused(exc_class, status, key=KEY, model=MODEL, code=None):
    name = exc_class.__name__
    try:
        make_client(key).responses.create(model=model, input="refuse me")
    except exc_class as e:
        check(e.status_code == status, f"{name}: status {e.status_code}")
        body = e.body if isinstance(e.body, dict) else {}
        check(isinstance(body.get("message"), str), f"{name}: error body {e.body!r}")
        if GATEWAY and code:
            check(e.code == code, f"{name}: tollgate code {e.body!r}")
        return
    except openai.APIStatusError as e:
        check(False, f"expected {name}, got {type(e).__name__} {e.status_code} {e.body!r}")
    check(False, f"expected {name}, the request succeeded")


nonce = uuid.uuid4().hex
errors = []
refused(openai.AuthenticationError, 401, key="tg-not-a-key-" + nonce, code="invalid_key")
errors.append("auth")
if os.environ.get("TOLLGATE_REVOKED_KEY"):
    refused(openai.AuthenticationError, 401, key=os.environ["TOLLGATE_REVOKED_KEY"], code="invalid_key")
    errors.append("revoked")
if os.environ.get("TOLLGATE_EXPIRED_KEY"):
    refused(openai.AuthenticationError, 401, key=os.environ["TOLLGATE_EXPIRED_KEY"], code="expired_key")
    errors.append("expired")
# An unknown model is a 400 on the Responses API ("The requested model … does not exist"), as on
# this door; the chat API's is a 404.
refused(openai.BadRequestError, 400, model="nope/none-" + nonce[:8], code="model_not_found")
errors.append("unknown_model")
if os.environ.get("TOLLGATE_LIMITED_KEY"):
    refused(openai.RateLimitError, 429, key=os.environ["TOLLGATE_LIMITED_KEY"], code="spend_limit_exceeded")
    errors.append("rate_limit")
if os.environ.get("TOLLGATE_NO_CREDIT_KEY"):
    refused(openai.APIStatusError, 402, key=os.environ["TOLLGATE_NO_CREDIT_KEY"], code="insufficient_credit")
    errors.append("payment")
done.append("errors(" + " ".join(errors) + ")")

print("ok: " + ", ".join(done))
