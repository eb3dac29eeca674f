"""The official OpenAI Python SDK's embeddings against tollgate, unmodified: only base_url and
api_key change.

Run by tests/it/python_sdk.rs with TOLLGATE_BASE_URL, TOLLGATE_KEY and TOLLGATE_EMBED_MODELS (a
comma-separated list: one model per upstream route) set. The SDK asks for base64 by default and
decodes it; encoding_format="float" must give the same vectors. Exits non-zero (with the reason)
on the first mismatch.
"""
import os
import struct
import sys

from openai import BadRequestError, OpenAI

client = OpenAI(base_url=os.environ["TOLLGATE_BASE_URL"] + "/v1", api_key=os.environ["TOLLGATE_KEY"])
models = os.environ["TOLLGATE_EMBED_MODELS"].split(",")
texts = ["the quick brown fox", "jumps over", "the lazy dog"]


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def as_f32(values):
    """JSON floats rounded to float32, the precision the vectors have."""
    return [struct.unpack("<f", struct.pack("<f", x))[0] for x in values]


for model in models:
    default = client.embeddings.create(model=model, input=texts)  # base64 on the wire
    floats = client.embeddings.create(model=model, input=texts, encoding_format="float")
    for r in (default, floats):
        check(r.object == "list", f"{model}: object {r.object}")
        check(r.model == model, f"{model}: model {r.model}")
        check([d.index for d in r.data] == [0, 1, 2], f"{model}: indexes {[d.index for d in r.data]}")
        check(all(d.object == "embedding" for d in r.data), f"{model}: data objects")
        check(all(len(d.embedding) == 768 for d in r.data), f"{model}: 768 dimensions")
        check(r.usage.prompt_tokens > 0, f"{model}: usage {r.usage}")
        check(r.usage.total_tokens == r.usage.prompt_tokens, f"{model}: total == prompt {r.usage}")
    same = lambda u: (u.prompt_tokens, u.total_tokens, getattr(u, "cost", None))
    check(same(default.usage) == same(floats.usage), f"{model}: usage {default.usage} vs {floats.usage}")
    check(getattr(default.usage, "cost", 0) > 0, f"{model}: the answer carries its cost {default.usage}")
    for b, f in zip(default.data, floats.data):
        check(b.embedding == as_f32(f.embedding), f"{model}: base64 and float vectors differ at {b.index}")

    one = client.embeddings.create(model=model, input="the quick brown fox", encoding_format="float")
    check(len(one.data) == 1 and one.data[0].index == 0, f"{model}: single input {one.data}")
    check(one.data[0].embedding == floats.data[0].embedding, f"{model}: single vs batched vector")

    small = client.embeddings.create(model=model, input=texts, dimensions=64)
    check(all(len(d.embedding) == 64 for d in small.data), f"{model}: dimensions=64")
    if model.startswith("google/"):
        # gemini-embedding-001 is unit length only at full width: the gateway normalises cuts.
        prefix = default.data[0].embedding[:64]
        norm = sum(x * x for x in prefix) ** 0.5
        close = all(abs(a - b / norm) < 1e-5 for a, b in zip(small.data[0].embedding, prefix))
        check(close, f"{model}: normalised truncated prefix")
        check(abs(sum(x * x for x in small.data[0].embedding) - 1) < 1e-4, f"{model}: unit length")
    else:
        check(small.data[0].embedding == default.data[0].embedding[:64], f"{model}: truncated prefix")

    tuned = client.embeddings.create(model=model, input="query", extra_body={"task_type": "RETRIEVAL_QUERY"})
    check(len(tuned.data) == 1, f"{model}: task_type {tuned}")

    too_wide = 3073 if model.startswith("google/") else 1024  # above the upstream model's width
    for bad, code in (({"input": ""}, "invalid_request_error"), ({"input": "x", "dimensions": too_wide}, "invalid_request_error")):
        try:
            client.embeddings.create(model=model, **bad)
            check(False, f"{model}: {bad} must raise")
        except BadRequestError as e:
            check(e.status_code == 400 and e.code == code, f"{model}: {bad} gave {e}")

try:
    client.embeddings.create(model="google/gemini-2.5-flash", input="x")
    check(False, "a chat model must not embed")
except BadRequestError as e:
    check(e.code == "embeddings_unsupported", f"chat model on embeddings: {e}")

print("ok: embeddings base64, float, dimensions, task_type, errors")
