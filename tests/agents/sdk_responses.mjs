// The official OpenAI TypeScript SDK's `responses.*` against tollgate's Responses door,
// unmodified: only baseURL and apiKey change. The same checks as tests/python/sdk_responses.py,
// with the same environment (run by tests/it/responses_clients.rs):
// - TOLLGATE_BASE_URL (the gateway, without /v1), TOLLGATE_KEY, TOLLGATE_MODEL;
// - TOLLGATE_GATEWAY=1: the gateway's own checks too (the error bodies' tollgate `code`), and
//   the keys for the refusals: TOLLGATE_REVOKED_KEY, TOLLGATE_EXPIRED_KEY,
//   TOLLGATE_NO_CREDIT_KEY (402), TOLLGATE_LIMITED_KEY (429). A refusal whose key is unset is
//   skipped (and left out of the `ok:` line).
// The answers follow the simulator's rules (sim/src/content.rs): "Echo: <last user text>",
// "Thinking: <text>", `[sim:call=NAME]` + `[sim:args=JSON]` make a function call, JSON mode
// answers {"echo":"<text>"}. Claude routes drop `text.format` (the chat adapter has no JSON
// mode for Claude), so the JSON check runs on the other routes only.
// Exits non-zero (with the reason) on the first mismatch; prints one `ok: …` line.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';

const env = process.env;
const BASE = env.TOLLGATE_BASE_URL;
const KEY = env.TOLLGATE_KEY;
const MODEL = env.TOLLGATE_MODEL;
const GATEWAY = env.TOLLGATE_GATEWAY === '1';
const IS_CLAUDE = MODEL.includes('claude');

function check(cond, what) {
  if (!cond) {
    console.error(`FAILED: ${what}`);
    process.exit(1);
  }
}
const show = (v) => JSON.stringify(v);
const ofType = (resp, type) => resp.output.filter((i) => i.type === type);

const makeClient = (key) => new OpenAI({ baseURL: `${BASE}/v1`, apiKey: key, maxRetries: 0 });
const client = makeClient(KEY);
const done = [];

// --- create (buffered text)
const reply = await client.responses.create({ model: MODEL, instructions: 'Be brief.', input: 'hello sdk' });
check(reply.object === 'response' && reply.status === 'completed', `response ${show(reply)}`);
check(reply.id.startsWith('resp_'), `id ${reply.id}`);
check(reply.output_text === 'Echo: hello sdk', `output_text ${show(reply.output_text)} of ${show(reply.output)}`);
const messages = ofType(reply, 'message');
check(messages.length === 1 && reply.output.length === 1, `one message item ${show(reply.output)}`);
check(messages[0].role === 'assistant' && messages[0].status === 'completed', `message ${show(messages[0])}`);
check(messages[0].content[0]?.type === 'output_text', `output_text part ${show(messages[0].content)}`);
const u = reply.usage;
check(u.input_tokens > 0 && u.output_tokens > 0, `usage ${show(u)}`);
check(u.total_tokens === u.input_tokens + u.output_tokens, `usage total ${show(u)}`);
done.push('create');

// --- stream: every event in order, numbered, then the final response
const stream = client.responses.stream({ model: MODEL, input: 'stream sdk [sim:chunks=4]' });
const events = [];
for await (const event of stream) events.push(event);
const final = await stream.finalResponse();
const types = events.map((e) => e.type);
check(types[0] === 'response.created' && types.at(-1) === 'response.completed', `event order ${show(types)}`);
events.forEach((e, i) => check(e.sequence_number === i, `sequence_number ${e.sequence_number} at ${i}: ${show(types)}`));
const order = [
  'response.output_item.added',
  'response.content_part.added',
  'response.output_text.delta',
  'response.output_text.done',
  'response.content_part.done',
  'response.output_item.done',
  'response.completed',
];
const firsts = order.map((t) => types.indexOf(t));
check(firsts.every((at, i) => at > 0 && (i === 0 || at > firsts[i - 1])), `event order ${show(types)}`);
const deltas = events.filter((e) => e.type === 'response.output_text.delta');
check(deltas.length >= 2, `streamed in pieces: ${deltas.length}`);
const streamed = deltas.map((e) => e.delta).join('');
check(streamed === 'Echo: stream sdk', `streamed text ${show(streamed)}`);
check(events.find((e) => e.type === 'response.output_text.done').text === streamed, 'output_text.done');
check(final.output_text === 'Echo: stream sdk' && final.status === 'completed', `final ${show(final)}`);
check(final.id === events[0].response.id, `one id: ${final.id} vs ${events[0].response.id}`);
check(final.usage.output_tokens > 0, `streamed usage ${show(final.usage)}`);
done.push('stream');

// --- a two-turn function-tool loop, stateless: the client sends the items back
const tools = [
  {
    type: 'function',
    name: 'get_weather',
    description: 'The weather in a city.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' } },
      required: ['city'],
      additionalProperties: false,
    },
    strict: true,
  },
];
const question = {
  role: 'user',
  content: 'Weather in Paris? [sim:call=get_weather] [sim:args={"city":"Paris"}]',
};
function theCall(resp, what) {
  const calls = ofType(resp, 'function_call');
  check(calls.length === 1, `${what}: one function_call ${show(resp.output)}`);
  const [call] = calls;
  check(call.name === 'get_weather' && show(JSON.parse(call.arguments)) === '{"city":"Paris"}', `${what}: ${show(call)}`);
  check(Boolean(call.call_id) && call.status === 'completed', `${what}: call_id, status ${show(call)}`);
  check(resp.output_text === '', `${what}: no text ${show(resp.output_text)}`);
  return call;
}
const result = (call) => ({ type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 21 C' });
const first = await client.responses.create({ model: MODEL, tools, store: false, input: [question] });
const call = theCall(first, 'tools');
const second = await client.responses.create({
  model: MODEL,
  tools,
  store: false,
  input: [question, ...first.output, result(call)],
});
check(second.output_text === 'Echo: received 1 tool result(s)', `after the tool ${show(second.output)}`);
// Not stored: nothing to retrieve.
try {
  await client.responses.retrieve(first.id);
  check(false, `a store:false response was retrieved: ${first.id}`);
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, `retrieve of a store:false response: ${e?.constructor?.name} ${e?.status}`);
}
done.push('tools');

// --- three turns on previous_response_id (stored by default): only the new items are sent
const turn1 = await client.responses.create({ model: MODEL, tools, input: [question] });
const call1 = theCall(turn1, 'turn 1');
const turn2 = await client.responses.create({
  model: MODEL,
  tools,
  previous_response_id: turn1.id,
  input: [result(call1)],
});
check(turn2.output_text === 'Echo: received 1 tool result(s)', `turn 2 ${show(turn2.output)}`);
const turn3 = await client.responses.create({
  model: MODEL,
  tools,
  previous_response_id: turn2.id,
  input: 'And tomorrow?',
});
check(turn3.output_text === 'Echo: And tomorrow?', `turn 3 ${show(turn3.output)}`);
// The upstream saw the whole conversation: more prompt than the same question alone.
const alone = await client.responses.create({ model: MODEL, tools, store: false, input: 'And tomorrow?' });
check(
  turn3.usage.input_tokens > alone.usage.input_tokens,
  `turn 3 carries the conversation: ${turn3.usage.input_tokens} vs ${alone.usage.input_tokens} alone`,
);
done.push('previous_response_id');

// --- reasoning: the encrypted content comes back and is sent back with the tool's result
const thinkQuestion = {
  role: 'user',
  content: 'Think, then weather in Paris? [sim:call=get_weather] [sim:args={"city":"Paris"}]',
};
const reasoningParams = {
  model: MODEL,
  tools,
  store: false,
  reasoning: { effort: 'low', summary: 'auto' },
  include: ['reasoning.encrypted_content'],
};
const thought = await client.responses.create({ ...reasoningParams, input: [thinkQuestion] });
const thinkCall = theCall(thought, 'reasoning');
const reasonings = ofType(thought, 'reasoning');
check(reasonings.length === 1, `one reasoning item ${show(thought.output)}`);
check(thought.output[0].type === 'reasoning', `reasoning comes first ${show(thought.output)}`);
const [reasoning] = reasonings;
const summary = reasoning.summary.map((s) => s.text).join('');
check(summary === 'Thinking: Think, then weather in Paris?', `reasoning summary ${show(reasoning.summary)}`);
if (IS_CLAUDE) {
  // Claude's signed thinking, which it must see again with the tool's result.
  check(reasoning.encrypted_content?.startsWith('tg1.'), `encrypted_content ${show(reasoning)}`);
}
if (!IS_CLAUDE) {
  // Claude's usage does not count its thinking apart from the rest of the output.
  check(thought.usage.output_tokens_details.reasoning_tokens > 0, `reasoning tokens ${show(thought.usage)}`);
}
const afterThought = await client.responses.create({
  ...reasoningParams,
  input: [thinkQuestion, ...thought.output, result(thinkCall)],
});
check(afterThought.output_text === 'Echo: received 1 tool result(s)', `after reasoning ${show(afterThought.output)}`);
done.push('reasoning');

// --- text.format json_schema
const schema = {
  type: 'object',
  properties: { echo: { type: 'string' } },
  required: ['echo'],
  additionalProperties: false,
};
const json = await client.responses.create({
  model: MODEL,
  input: 'json sdk',
  text: { format: { type: 'json_schema', name: 'echo', schema, strict: true } },
});
if (!IS_CLAUDE) {
  let parsed;
  try {
    parsed = JSON.parse(json.output_text);
  } catch (e) {
    check(false, `the json_schema answer does not parse (${e}): ${show(json.output_text)}`);
  }
  check(show(parsed) === '{"echo":"json sdk"}', `json_schema answer ${show(parsed)}`);
  done.push('json_schema');
} else {
  check(json.output_text === 'Echo: json sdk', `json_schema answer on Claude ${show(json.output_text)}`);
}

// --- retrieve and delete a stored response
const got = await client.responses.retrieve(reply.id);
check(got.id === reply.id && got.status === 'completed', `retrieved ${show(got)}`);
check(got.output_text === 'Echo: hello sdk', `retrieved output_text ${show(got.output_text)}`);
check(show(got.output) === show(reply.output), `retrieved output ${show(got.output)} vs ${show(reply.output)}`);
await client.responses.delete(reply.id);
try {
  await client.responses.retrieve(reply.id);
  check(false, `a deleted response was retrieved: ${reply.id}`);
} catch (e) {
  check(e instanceof OpenAI.NotFoundError, `retrieve after delete: ${e?.constructor?.name} ${e?.status} ${show(e?.error)}`);
}
done.push('retrieve', 'delete');

// --- errors, as the SDK's error classes
const nonce = randomUUID().replaceAll('-', '');
async function refused(errorClass, status, { key = KEY, model = MODEL, code } = {}) {
  const name = errorClass.name;
  try {
    await makeClient(key).responses.create({ model, input: 'refuse me' });
  } catch (e) {
    check(e instanceof errorClass, `expected ${name}, got ${e?.constructor?.name} ${e?.status} ${show(e?.error)}`);
    check(e.status === status, `${name}: status ${e.status}`);
    check(typeof e.error?.message === 'string', `${name}: error body ${show(e.error)}`);
    if (GATEWAY && code) check(e.code === code, `${name}: tollgate code ${show(e.error)}`);
    return;
  }
  check(false, `expected ${name}, the request succeeded`);
}

const errors = [];
await refused(OpenAI.AuthenticationError, 401, { key: `tg-not-a-key-${nonce}`, code: 'invalid_key' });
errors.push('auth');
if (env.TOLLGATE_REVOKED_KEY) {
  await refused(OpenAI.AuthenticationError, 401, { key: env.TOLLGATE_REVOKED_KEY, code: 'invalid_key' });
  errors.push('revoked');
}
if (env.TOLLGATE_EXPIRED_KEY) {
  await refused(OpenAI.AuthenticationError, 401, { key: env.TOLLGATE_EXPIRED_KEY, code: 'expired_key' });
  errors.push('expired');
}
// An unknown model is a 400 on the Responses API ("The requested model … does not exist"), as
// on this door; the chat API's is a 404.
await refused(OpenAI.BadRequestError, 400, { model: `nope/none-${nonce.slice(0, 8)}`, code: 'model_not_found' });
errors.push('unknown_model');
if (env.TOLLGATE_LIMITED_KEY) {
  await refused(OpenAI.RateLimitError, 429, { key: env.TOLLGATE_LIMITED_KEY, code: 'spend_limit_exceeded' });
  errors.push('rate_limit');
}
if (env.TOLLGATE_NO_CREDIT_KEY) {
  await refused(OpenAI.APIError, 402, { key: env.TOLLGATE_NO_CREDIT_KEY, code: 'insufficient_credit' });
  errors.push('payment');
}
done.push(`errors(${errors.join(' ')})`);

console.log(`ok: ${done.join(', ')}`);
