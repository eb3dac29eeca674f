// The official Anthropic TypeScript SDK against tollgate's Messages door, unmodified: only
// baseURL and apiKey change. The same checks as tests/python/sdk_messages.py, with the same
// environment (run by tests/it/messages_clients.rs):
// - TOLLGATE_BASE_URL (the gateway, without /v1), TOLLGATE_KEY, TOLLGATE_MODEL;
// - TOLLGATE_THINKING: `enabled` (a budget, as Claude Sonnet 4.5 takes it) or `adaptive`;
// - TOLLGATE_GATEWAY=1: the gateway's own checks too (the `x-api-key` header, the error bodies'
//   tollgate `code`, the 404's message), and the keys for the refusals: TOLLGATE_REVOKED_KEY,
//   TOLLGATE_EXPIRED_KEY, TOLLGATE_NO_CREDIT_KEY (402), TOLLGATE_LIMITED_KEY (429). A refusal
//   whose key is unset is skipped (and left out of the `ok:` line).
// This SDK sends its apiKey as `Authorization: Bearer`; the simulator's direct API takes only
// `x-api-key`, so without TOLLGATE_GATEWAY the key goes in that header instead.
// Exits non-zero (with the reason) on the first mismatch; prints one `ok: …` line.
import { randomUUID } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';

const env = process.env;
const BASE = env.TOLLGATE_BASE_URL;
const KEY = env.TOLLGATE_KEY;
const MODEL = env.TOLLGATE_MODEL;
const THINKING = env.TOLLGATE_THINKING ?? 'enabled';
const GATEWAY = env.TOLLGATE_GATEWAY === '1';
const IS_CLAUDE = MODEL.includes('claude');

function check(cond, what) {
  if (!cond) {
    console.error(`FAILED: ${what}`);
    process.exit(1);
  }
}
const show = (v) => JSON.stringify(v);
const texts = (msg) => msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

/** The SDK as a user sets it up; `xApiKey`: the key in `x-api-key` instead of Bearer. */
function makeClient(key, xApiKey = !GATEWAY) {
  const opts = { baseURL: BASE, apiKey: key, maxRetries: 0 };
  if (xApiKey) opts.defaultHeaders = { 'x-api-key': key, Authorization: null };
  return new Anthropic(opts);
}

const client = makeClient(KEY);
const done = [];

// --- create (buffered text)
const reply = await client.messages.create({
  model: MODEL,
  max_tokens: 256,
  messages: [{ role: 'user', content: 'hello sdk' }],
});
check(reply.type === 'message' && reply.role === 'assistant', `message ${show(reply)}`);
check(texts(reply) === 'Echo: hello sdk', `text ${show(reply.content)}`);
check(reply.stop_reason === 'end_turn', `stop_reason ${reply.stop_reason}`);
check(reply.usage.input_tokens > 0 && reply.usage.output_tokens > 0, `usage ${show(reply.usage)}`);
const plainInput = reply.usage.input_tokens;
done.push('create');

if (GATEWAY) {
  // The other credential header, as Claude Code sends ANTHROPIC_API_KEY: `x-api-key`.
  const r = await makeClient(KEY, true).messages.create({
    model: MODEL,
    max_tokens: 64,
    messages: [{ role: 'user', content: 'x-api-key sdk' }],
  });
  check(texts(r) === 'Echo: x-api-key sdk', `x-api-key text ${show(r.content)}`);
  done.push('x-api-key');
}

// --- stream: text events, then the final message
const stream = client.messages.stream({
  model: MODEL,
  max_tokens: 256,
  messages: [{ role: 'user', content: 'stream sdk [sim:chunks=4]' }],
});
let streamed = '';
let deltas = 0;
stream.on('text', (t) => {
  streamed += t;
  deltas += 1;
});
const final = await stream.finalMessage();
check(streamed === 'Echo: stream sdk', `streamed text ${show(streamed)}`);
check(deltas >= 2, `streamed in pieces: ${deltas}`);
check(texts(final) === 'Echo: stream sdk', `final message ${show(final.content)}`);
check(final.stop_reason === 'end_turn', `streamed stop_reason ${final.stop_reason}`);
check(final.usage.output_tokens > 0, `streamed usage ${show(final.usage)}`);
done.push('stream');

// --- a two-turn tool loop
const tools = [
  {
    name: 'get_weather',
    description: 'The weather in a city.',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
];
const question = {
  role: 'user',
  content: 'Weather in Paris? [sim:call=get_weather] [sim:args={"city":"Paris"}]',
};
const first = await client.messages.create({ model: MODEL, max_tokens: 512, tools, messages: [question] });
check(first.stop_reason === 'tool_use', `tool stop_reason ${first.stop_reason} ${show(first.content)}`);
const calls = first.content.filter((b) => b.type === 'tool_use');
check(calls.length === 1, `one tool_use ${show(first.content)}`);
const call = calls[0];
check(call.name === 'get_weather' && show(call.input) === '{"city":"Paris"}', `tool_use ${show(call)}`);
check(Boolean(call.id), `tool_use id ${show(call)}`);
const second = await client.messages.create({
  model: MODEL,
  max_tokens: 512,
  tools,
  messages: [
    question,
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Sunny, 21 C' }] },
  ],
});
check(second.stop_reason === 'end_turn', `final stop_reason ${second.stop_reason}`);
check(texts(second) === 'Echo: received 1 tool result(s)', `final answer ${show(second.content)}`);
done.push('tools');

// --- thinking
const thinking = THINKING === 'enabled' ? { type: 'enabled', budget_tokens: 1024 } : { type: 'adaptive' };
const thought = await client.messages.create({
  model: MODEL,
  max_tokens: 4096,
  thinking,
  messages: [{ role: 'user', content: 'think sdk' }],
});
check(texts(thought) === 'Echo: think sdk', `thinking answer ${show(thought.content)}`);
const blocks = thought.content.filter((b) => b.type === 'thinking');
if (THINKING === 'enabled') {
  check(blocks.length === 1, `one thinking block ${show(thought.content)}`);
  check(thought.content[0].type === 'thinking', `thinking comes first ${show(thought.content)}`);
  check(Boolean(blocks[0].signature), `thinking signature ${show(blocks[0])}`);
}
for (const b of blocks) {
  check(b.thinking === 'Thinking: think sdk' || b.thinking === '', `thinking text ${show(b.thinking)}`);
}
check(thought.usage.output_tokens > 0, `thinking usage ${show(thought.usage)}`);
done.push(`thinking ${THINKING}`);

// --- prompt caching: one cache_control system prompt, sent twice (long enough for every
// model's minimum, unique per run so that the first request writes).
const nonce = randomUUID().replaceAll('-', '');
const rules = Array.from({ length: 400 }, (_, i) => `Rule ${i}: answer plainly and briefly, citing nothing.`);
const longSystem = `Run ${nonce}. ${rules.join(' ')}`;
check(longSystem.length / 4 > 4096, 'the cached prefix is long enough');
const cachedAsk = (text) =>
  client.messages.create({
    model: MODEL,
    max_tokens: 256,
    system: [{ type: 'text', text: longSystem, cache_control: { type: 'ephemeral' } }],
    messages: [{ role: 'user', content: text }],
  });
const write = await cachedAsk('cache sdk one');
const read = await cachedAsk('cache sdk two');
check(texts(read) === 'Echo: cache sdk two', `cached answer ${show(read.content)}`);
if (IS_CLAUDE) {
  check((write.usage.cache_creation_input_tokens ?? 0) > 0, `first request writes the cache: ${show(write.usage)}`);
  check((write.usage.cache_read_input_tokens ?? 0) === 0, `first request reads nothing: ${show(write.usage)}`);
}
check((read.usage.cache_read_input_tokens ?? 0) > 0, `second request reads the cache: ${show(read.usage)}`);
done.push('cache');

// --- count_tokens
const counted = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'hello sdk' }] });
check(counted.input_tokens > 0, `count_tokens ${show(counted)}`);
check(counted.input_tokens === plainInput, `count_tokens ${counted.input_tokens} vs create's ${plainInput}`);
const countedTools = await client.messages.countTokens({ model: MODEL, tools, messages: [question] });
check(countedTools.input_tokens > counted.input_tokens, `tools count ${show(countedTools)}`);
done.push('count_tokens');

// --- errors, as the SDK's error classes
async function refused(errorClass, status, { key = KEY, model = MODEL, code, kind, message } = {}) {
  const name = errorClass.name;
  try {
    await makeClient(key).messages.create({
      model,
      max_tokens: 16,
      messages: [{ role: 'user', content: 'refuse me' }],
    });
  } catch (e) {
    check(e instanceof errorClass, `expected ${name}, got ${e?.constructor?.name} ${e?.status} ${show(e?.error)}`);
    check(e.status === status, `${name}: status ${e.status}`);
    const body = e.error ?? {};
    check(body.type === 'error', `${name}: error envelope ${show(body)}`);
    const err = body.error ?? {};
    if (kind) check(err.type === kind, `${name}: error type ${show(err)}`);
    if (GATEWAY && code) check(err.code === code, `${name}: tollgate code ${show(err)}`);
    if (GATEWAY && message) check(err.message === message, `${name}: message ${show(err)}`);
    return;
  }
  check(false, `expected ${name}, the request succeeded`);
}

const errors = [];
await refused(Anthropic.AuthenticationError, 401, {
  key: `tg-not-a-key-${nonce}`,
  code: 'invalid_key',
  kind: 'authentication_error',
});
errors.push('auth');
if (env.TOLLGATE_REVOKED_KEY) {
  await refused(Anthropic.AuthenticationError, 401, { key: env.TOLLGATE_REVOKED_KEY, kind: 'authentication_error' });
  errors.push('revoked');
}
if (env.TOLLGATE_EXPIRED_KEY) {
  await refused(Anthropic.AuthenticationError, 401, {
    key: env.TOLLGATE_EXPIRED_KEY,
    code: 'expired_key',
    kind: 'authentication_error',
  });
  errors.push('expired');
}
const unknown = `nope/none-${nonce.slice(0, 8)}`;
await refused(Anthropic.NotFoundError, 404, {
  model: unknown,
  code: 'model_not_found',
  kind: 'not_found_error',
  message: `model "${unknown}" not found`,
});
errors.push('not_found');
if (env.TOLLGATE_LIMITED_KEY) {
  await refused(Anthropic.RateLimitError, 429, {
    key: env.TOLLGATE_LIMITED_KEY,
    code: 'spend_limit_exceeded',
    kind: 'rate_limit_error',
  });
  errors.push('rate_limit');
}
if (env.TOLLGATE_NO_CREDIT_KEY) {
  await refused(Anthropic.APIError, 402, {
    key: env.TOLLGATE_NO_CREDIT_KEY,
    code: 'insufficient_credit',
    kind: 'billing_error',
  });
  errors.push('payment');
}
done.push(`errors(${errors.join(' ')})`);

console.log(`ok: ${done.join(', ')}`);
