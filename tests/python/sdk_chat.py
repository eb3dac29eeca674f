"""The official OpenAI Python SDK against tollgate, unmodified: only base_url and api_key change.

Run by tests/it/python_sdk.rs with TOLLGATE_BASE_URL, TOLLGATE_KEY and TOLLGATE_MODEL set.
Exits non-zero (with the reason) on the first mismatch.
"""
import os
import sys

from openai import OpenAI

client = OpenAI(base_url=os.environ["TOLLGATE_BASE_URL"] + "/v1", api_key=os.environ["TOLLGATE_KEY"])
model = os.environ["TOLLGATE_MODEL"]


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


ids = [m.id for m in client.models.list()]
check(model in ids, f"{model} listed in {ids}")

reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello sdk"}])
check(reply.object == "chat.completion", f"object {reply.object}")
check(reply.model == model, f"model {reply.model}")
check(reply.choices[0].message.content == "Echo: hello sdk", f"content {reply.choices[0].message.content!r}")
check(reply.choices[0].finish_reason == "stop", f"finish {reply.choices[0].finish_reason}")
check(reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens, f"usage {reply.usage}")
check(getattr(reply.usage, "cost", 0) > 0 and reply.usage.generation_id == reply.id, f"the cost in the answer {reply.usage}")

text, usage, roles = "", None, []
for chunk in client.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "stream sdk"}], stream=True
):
    if chunk.usage is not None:
        usage = chunk.usage
        check(chunk.choices == [], "the usage chunk has no choices")
    for choice in chunk.choices:
        if choice.delta.role:
            roles.append(choice.delta.role)
        text += choice.delta.content or ""
check(text == "Echo: stream sdk", f"streamed text {text!r}")
check(roles[:1] == ["assistant"], f"first delta role {roles}")
check(usage is not None and usage.total_tokens > 0, f"final usage {usage}")
check(getattr(usage, "cost", 0) > 0, f"the cost in the final usage chunk {usage}")

try:
    client.chat.completions.create(model="nope/none", messages=[{"role": "user", "content": "x"}])
    check(False, "unknown model must raise")
except Exception as e:  # the SDK maps 400 to BadRequestError
    check(getattr(e, "status_code", None) == 400, f"unknown model status {e}")
    check(getattr(e, "code", None) == "model_not_found", f"unknown model code {e}")

print("ok: models, buffered, streamed, errors")
