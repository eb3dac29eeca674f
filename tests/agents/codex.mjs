// The Codex CLI, the real one (`node_modules/.bin/codex`, the native binary of @openai/codex),
// non-interactive (`codex exec --json`) against a Responses API endpoint: tollgate's door (run
// by tests/it/responses_clients.rs) or any other that speaks `POST /v1/responses` with SSE.
//
// Environment:
// - TOLLGATE_BASE_URL: the endpoint without /v1 (the provider's `base_url` is it plus /v1);
// - TOLLGATE_KEY (the provider's `env_key` names it: sent as `Authorization: Bearer`),
//   TOLLGATE_MODEL (sent verbatim as `model`);
// - CODEX_TASK: `answer` (one prompt, one answer) or `tool` (the simulator asks for Codex's
//   shell tool, `exec_command`, by `[sim:call=exec_command]` with `[sim:args={"cmd":…}]`; Codex
//   runs the command unattended — approvals never, no sandbox — and sends its
//   `function_call_output`; the simulator then answers "Echo: received 1 tool result(s)");
// - CODEX_EFFORT: Codex's `model_reasoning_effort` (unset: none, as Codex sends for a model it
//   has no metadata for; it always asks for reasoning summaries); with one, every answer must
//   carry a reasoning item, which Codex shows and sends back in the next request of the turn;
// - CODEX_TIMEOUT_MS (120000): the CLI is killed after that.
//
// Codex runs in a fresh temporary HOME, CODEX_HOME (holding only the config.toml below) and
// working dir, with update checks and analytics off and no retries (a refused request fails the
// run at once). Its tools are its defaults. Codex exits 0 with an empty answer when it cannot
// read a stream, so the answer's text is what is checked, from its JSONL events. Exits
// non-zero (with the CLI's output) on the first mismatch; prints one `ok: …` line.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const env = process.env;
const base = env.TOLLGATE_BASE_URL;
const key = env.TOLLGATE_KEY;
const model = env.TOLLGATE_MODEL;
const task = env.CODEX_TASK ?? 'answer';
const effort = env.CODEX_EFFORT ?? '';
const timeout = Number(env.CODEX_TIMEOUT_MS ?? 120000);
const codex = join(here, 'node_modules/.bin/codex');
if (!base || !key || !model) {
  console.error('FAILED: TOLLGATE_BASE_URL, TOLLGATE_KEY and TOLLGATE_MODEL are required');
  process.exit(2);
}
if (!existsSync(codex)) {
  console.error(`FAILED: ${codex} is missing: run \`make agent-deps\` (npm ci in tests/agents)`);
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-codex-'));
const home = join(dir, 'home');
const codexHome = join(dir, 'codex');
const work = join(dir, 'work');
for (const d of [home, codexHome, work]) mkdirSync(d);
const lastMessage = join(dir, 'last-message.txt');

const toml = (s) => JSON.stringify(s); // a TOML basic string is a JSON string
// The README's example (a gateway as a custom Responses provider), plus what a test run needs:
// no approval prompt, no sandbox, no update check, no analytics, no retry.
const config = [
  `model = ${toml(model)}`,
  'model_provider = "tollgate"',
  'approval_policy = "never"',
  'sandbox_mode = "danger-full-access"',
  'check_for_update_on_startup = false',
  ...(effort ? [`model_reasoning_effort = ${toml(effort)}`] : []),
  '',
  '[analytics]',
  'enabled = false',
  '',
  '[model_providers.tollgate]',
  'name = "tollgate"',
  `base_url = ${toml(`${base}/v1`)}`,
  'env_key = "TOLLGATE_KEY"',
  'wire_api = "responses"',
  'request_max_retries = 0',
  'stream_max_retries = 0',
  '',
].join('\n');
writeFileSync(join(codexHome, 'config.toml'), config);

const answerPrompt = 'hello from codex';
const command = 'echo tollgate-tool-ran > proof.txt && echo wrote-proof';
const prompt =
  task === 'tool'
    ? `Write the proof file. [sim:call=exec_command] [sim:args=${JSON.stringify({ cmd: command })}]`
    : answerPrompt;

const childEnv = {
  PATH: env.PATH ?? '/usr/bin:/bin',
  HOME: home,
  CODEX_HOME: codexHome,
  TOLLGATE_KEY: key,
};
// `--strict-config`: a key this version does not know fails the run instead of being ignored.
const args = ['exec', '--json', '--strict-config', '--skip-git-repo-check', '-o', lastMessage, prompt];
const run = spawnSync(codex, args, {
  cwd: work,
  env: childEnv,
  encoding: 'utf8',
  timeout,
  killSignal: 'SIGKILL',
  stdio: ['ignore', 'pipe', 'pipe'],
});

const events = [];
for (const line of (run.stdout ?? '').split('\n')) {
  if (!line.trim()) continue;
  try {
    events.push(JSON.parse(line));
  } catch {
    // Not an event (a stray line): shown on failure with the rest of stdout.
  }
}

function fail(what) {
  console.error(
    [
      `FAILED: ${what}`,
      `codex ${args.map((a) => JSON.stringify(a)).join(' ')} (status ${run.status}, signal ${run.signal}, error ${run.error})`,
      `--- config.toml\n${config}`,
      `--- stdout (JSONL events)\n${run.stdout}`,
      `--- stderr\n${run.stderr}`,
    ].join('\n'),
  );
  process.exit(1);
}

if (run.error || run.signal) fail(`the CLI did not finish within ${timeout} ms`);
const completed = events.filter((e) => e.type === 'item.completed').map((e) => e.item);
// Stream-level errors and a failed turn; item-level `error`s are advisories (e.g. "Model
// metadata for `…` not found", for any model outside Codex's own list).
const errors = events.filter((e) => e.type === 'error' || e.type === 'turn.failed');
if (errors.length) fail(`the turn failed: ${[...new Set(errors.map((e) => e.message ?? e.error?.message))].join(' | ')}`);
const turns = events.filter((e) => e.type === 'turn.completed');
if (turns.length !== 1) fail(`one completed turn, not ${turns.length}`);
if (run.status !== 0) fail(`exit status ${run.status}`);
const usage = turns[0].usage ?? {};
if (!(usage.input_tokens > 0 && usage.output_tokens > 0)) fail(`the turn's usage ${JSON.stringify(usage)}`);

const messages = completed.filter((i) => i.type === 'agent_message').map((i) => i.text);
const answer = messages.at(-1);
if (typeof answer !== 'string' || !answer.startsWith('Echo: ')) fail(`answer ${JSON.stringify(answer)}`);
const written = existsSync(lastMessage) ? readFileSync(lastMessage, 'utf8') : '';
if (written.trim() !== answer.trim()) fail(`the last message file holds ${JSON.stringify(written)}`);
const commands = completed.filter((i) => i.type === 'command_execution');
const reasoning = completed.filter((i) => i.type === 'reasoning');
if (task === 'tool') {
  if (answer !== 'Echo: received 1 tool result(s)') fail(`the answer after the tool: ${answer}`);
  // Exactly one execution: a call the client cannot read back would be asked for again.
  if (commands.length !== 1) fail(`one command execution, not ${commands.length}`);
  const [ran] = commands;
  if (!ran.command.includes(command) || ran.exit_code !== 0 || ran.status !== 'completed') {
    fail(`the command ran ${JSON.stringify(ran)}`);
  }
  if (ran.aggregated_output !== 'wrote-proof\n') fail(`the command's output ${JSON.stringify(ran.aggregated_output)}`);
  const proof = join(work, 'proof.txt');
  if (!existsSync(proof) || readFileSync(proof, 'utf8') !== 'tollgate-tool-ran\n') fail('the proof file was not written');
} else {
  if (commands.length) fail(`no command for a plain answer: ${JSON.stringify(commands)}`);
  // Codex sends its environment context as a user message before the prompt; a route that
  // joins consecutive user messages echoes both.
  if (!answer.endsWith(answerPrompt)) fail(`the answer does not echo the prompt: ${answer.slice(-200)}`);
}
if (effort) {
  // Reasoning shown for every request of the turn (one answer, or the call and the answer).
  const want = task === 'tool' ? 2 : 1;
  if (reasoning.length !== want) fail(`${want} reasoning item(s), not ${reasoning.length}: ${JSON.stringify(reasoning)}`);
  if (!reasoning.every((r) => r.text.startsWith('Thinking: '))) fail(`reasoning text ${JSON.stringify(reasoning)}`);
}

rmSync(dir, { recursive: true, force: true });
const thought = `${effort ? `, effort ${effort}` : ''}, ${reasoning.length} reasoning`;
console.log(
  `ok: codex ${task} on ${model}: ${commands.length} command(s)${thought}, usage in ${usage.input_tokens} (cached ${usage.cached_input_tokens ?? 0}) out ${usage.output_tokens}`,
);
